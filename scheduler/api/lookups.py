"""Finding what a URL names, or answering 404 with a one-line detail.

An id that no row can hold (too long, a NUL, not UTF-8) is simply not found:
it never reaches the database.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session, defer

from sluice.scheduler.api.errors import not_found
from sluice.scheduler.control.inputs import ID_MAX, InputError, storable
from sluice.scheduler.core.models import Dag, DagRun, TaskInstance
from sluice.scheduler.core.queries.import_errors import why_missing
from sluice.scheduler.core.queries.ti_lookup import TiNotFound, find_task_instance

WITHOUT_DEFINITION = (defer(Dag.serialized),)
"""A DAG row without its definition: the pages take what they need of it from
`views.ShapeCache`, which reads `serialized` only for a DAG version it does not hold."""


def _usable(value: str) -> bool:
    if len(value) > ID_MAX:
        return False
    try:
        storable(value)
    except InputError:
        return False
    return True


def find_dag(session: Session, dag_id: str, *, definition: bool = False) -> Dag:
    """The active DAG `dag_id`; its `serialized` is loaded on first access, or with the
    row when `definition` (a route that will read it: one round trip, not two)."""
    options = () if definition else WITHOUT_DEFINITION
    dag = session.get(Dag, dag_id, options=options) if _usable(dag_id) else None
    if dag is None or not dag.is_active:
        raise not_found(f"unknown DAG {dag_id!r}{why_missing(session, dag_id)}")
    return dag


def find_run(session: Session, dag_id: str, run_id: str) -> tuple[Dag, DagRun]:
    dag = find_dag(session, dag_id)
    run = None
    if _usable(run_id):
        run = session.scalar(
            select(DagRun).where(DagRun.dag_id == dag.dag_id, DagRun.run_id == run_id)
        )
    if run is None:
        raise not_found(f"DAG {dag_id!r} has no run {run_id!r}")
    return dag, run


def find_ti(
    session: Session, dag_id: str, run_id: str, task_id: str, map_index: int | None = None
) -> tuple[Dag, DagRun, TaskInstance]:
    """The TI, or 404: a mapped task's TI is named by its `map_index`."""
    dag, run = find_run(session, dag_id, run_id)
    if not _usable(task_id):
        raise not_found(f"run {run_id!r} of DAG {dag_id!r} has no task {task_id!r}")
    try:
        ti = find_task_instance(session, run.id, task_id, map_index, named_by="map_index")
    except TiNotFound as exc:
        raise not_found(f"run {run_id!r} of DAG {dag_id!r} {exc}") from None
    return dag, run, ti


def find_task(session: Session, dag_id: str, run_id: str, task_id: str) -> tuple[Dag, DagRun]:
    """The DAG and run, or 404 unless the run has a TI of `task_id` (mapped or not)."""
    dag, run = find_run(session, dag_id, run_id)
    found = _usable(task_id) and session.scalar(
        select(TaskInstance.id)
        .where(TaskInstance.dag_run_id == run.id, TaskInstance.task_id == task_id)
        .limit(1)
    )
    if not found:
        raise not_found(f"run {run_id!r} of DAG {dag_id!r} has no task {task_id!r}")
    return dag, run
