"""`/api/v1/dags`: the DAGs with their recent runs, one DAG, pausing, and the grid."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Annotated

from fastapi import APIRouter, Query
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from sluice.scheduler.api.deps import CanRead, CanWrite, DbSession
from sluice.scheduler.api.lookups import find_dag
from sluice.scheduler.api.responses import errors
from sluice.scheduler.api.schemas import (
    DagDetail,
    DagList,
    DagPatch,
    DagSummary,
    Grid,
    GridCell,
    GridRun,
    ImportErrorOut,
)
from sluice.scheduler.api.views import dag_summary, task_order, task_specs
from sluice.scheduler.core.models import Dag, DagFile, DagRun, TaskInstance
from sluice.scheduler.core.states import RUN_UNFINISHED

RECENT_RUNS = 10

router = APIRouter(prefix="/api/v1/dags", tags=["dags"])


def recent_runs(session: Session, dag_ids: Sequence[str], per_dag: int) -> dict[str, list[DagRun]]:
    """The newest `per_dag` runs of each DAG (by logical date), newest first; one query."""
    if not dag_ids:
        return {}
    rank = (
        func.row_number()
        .over(partition_by=DagRun.dag_id, order_by=DagRun.logical_date.desc())
        .label("rank")
    )
    ranked = select(DagRun.id, rank).where(DagRun.dag_id.in_(list(dag_ids))).subquery()
    rows = session.scalars(
        select(DagRun)
        .join(ranked, ranked.c.id == DagRun.id)
        .where(ranked.c.rank <= per_dag)
        .order_by(DagRun.dag_id, DagRun.logical_date.desc())
    ).all()
    found: dict[str, list[DagRun]] = defaultdict(list)
    for run in rows:
        found[run.dag_id].append(run)
    return found


@router.get("", response_model=DagList, dependencies=[CanRead], responses=errors())
def list_dags(session: DbSession) -> DagList:
    """Active DAGs with their last runs' states, and the DAG files that failed to import."""
    dags = session.scalars(select(Dag).where(Dag.is_active.is_(True)).order_by(Dag.dag_id)).all()
    broken = session.scalars(
        select(DagFile).where(DagFile.import_error.is_not(None)).order_by(DagFile.fileloc)
    ).all()
    recent = recent_runs(session, [d.dag_id for d in dags], RECENT_RUNS)
    return DagList(
        dags=[dag_summary(d, recent.get(d.dag_id, [])) for d in dags],
        import_errors=[
            ImportErrorOut(fileloc=f.fileloc, error=f.import_error or "") for f in broken
        ],
    )


@router.get("/{dag_id}", response_model=DagDetail, dependencies=[CanRead], responses=errors(404))
def get_dag(dag_id: str, session: DbSession) -> DagDetail:
    """One DAG with its tasks in topological order."""
    dag = find_dag(session, dag_id)
    summary = dag_summary(dag, recent_runs(session, [dag.dag_id], RECENT_RUNS).get(dag.dag_id, []))
    return DagDetail(**summary.model_dump(), tasks=task_specs(dag.serialized))


@router.patch(
    "/{dag_id}", response_model=DagSummary, dependencies=[CanWrite], responses=errors(404)
)
def patch_dag(dag_id: str, body: DagPatch, session: DbSession) -> DagSummary:
    """Pause or unpause a DAG's schedule (manual runs may still be triggered)."""
    dag = find_dag(session, dag_id)
    dag.is_paused = body.is_paused
    session.commit()
    return dag_summary(dag, recent_runs(session, [dag.dag_id], RECENT_RUNS).get(dag.dag_id, []))


@router.get("/{dag_id}/grid", response_model=Grid, dependencies=[CanRead], responses=errors(404))
def grid(
    dag_id: str,
    session: DbSession,
    limit: Annotated[int, Query(ge=1, le=100, description="how many of the newest runs")] = 20,
) -> Grid:
    """The newest runs (columns, oldest first) by tasks (rows) with each cell's state."""
    dag = find_dag(session, dag_id)
    runs = list(
        session.scalars(
            select(DagRun)
            .where(DagRun.dag_id == dag.dag_id)
            .order_by(DagRun.logical_date.desc())
            .limit(limit)
        ).all()
    )
    runs.reverse()
    cells: dict[int, dict[str, GridCell]] = defaultdict(dict)
    if runs:
        rows = session.execute(
            select(
                TaskInstance.dag_run_id,
                TaskInstance.task_id,
                TaskInstance.state,
                TaskInstance.try_number,
            ).where(TaskInstance.dag_run_id.in_([r.id for r in runs]))
        ).all()
        for run_pk, task_id, state, try_number in rows:
            cells[run_pk][task_id] = GridCell(state=state, try_number=try_number)
    task_ids = task_order(dag.serialized)
    extra = sorted({t for c in cells.values() for t in c} - set(task_ids))
    return Grid(
        dag_id=dag.dag_id,
        task_ids=task_ids + extra,
        runs=[
            GridRun(
                run_id=r.run_id,
                state=r.state,
                run_type=r.run_type,
                logical_date=r.logical_date,
                start_date=r.start_date,
                end_date=r.end_date,
                cells=cells.get(r.id, {}),
            )
            for r in runs
        ],
        active=any(r.state in RUN_UNFINISHED for r in runs),
    )
