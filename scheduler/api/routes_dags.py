"""`/api/v1/dags`: the DAGs with their recent runs, one DAG, pausing, and the grid.

What the pages take of a DAG's definition (its task order, task count and task list)
comes from `ApiState.shapes`, built once per DAG version; a DAG row is read without
its definition (`lookups.WITHOUT_DEFINITION`), and no list reads a run's conf.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Response
from sqlalchemy import String, bindparam, func, select, true
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import Session

from sluice.scheduler.api.deps import CanRead, CanWrite, DbSession, State
from sluice.scheduler.api.grid import (
    compact_columns,
    compact_grid,
    grid_cells,
    newest_runs,
    unknown_ids,
)
from sluice.scheduler.api.lookups import WITHOUT_DEFINITION, find_dag
from sluice.scheduler.api.responses import errors
from sluice.scheduler.api.schemas import (
    CompactGrid,
    DagDetail,
    DagList,
    DagPatch,
    DagSummary,
    Grid,
    GridRun,
    ImportErrorOut,
    RunBrief,
)
from sluice.scheduler.api.state import ApiState
from sluice.scheduler.api.views import DagShape, dag_detail_json, dag_summary
from sluice.scheduler.core.models import Dag, DagFile, DagRun
from sluice.scheduler.core.queries.assets import assets_of_dag
from sluice.scheduler.core.queries.watches import watch_errors
from sluice.scheduler.core.states import RUN_UNFINISHED

RECENT_RUNS = 10

router = APIRouter(prefix="/api/v1/dags", tags=["dags"])


def recent_runs(
    session: Session, dag_ids: Sequence[str], per_dag: int
) -> dict[str, list[RunBrief]]:
    """The newest `per_dag` runs of each DAG (by logical date), newest first; one query of
    the columns shown (never a run's conf). On PostgreSQL each DAG's runs are read
    newest first from the (dag_id, logical_date) index and the read stops after
    `per_dag` (a LATERAL join): the cost does not grow with the DAGs' history. SQLite
    (the embedded mode) ranks every run of the DAGs with a window function."""
    if not dag_ids:
        return {}
    if session.get_bind().dialect.name == "postgresql":
        wanted = (
            func.unnest(bindparam("dag_ids", list(dag_ids), type_=ARRAY(String)))
            .table_valued("dag_id")
            .render_derived()
        )
        newest = (
            select(DagRun.dag_id, DagRun.run_id, DagRun.state, DagRun.logical_date)
            .where(DagRun.dag_id == wanted.c.dag_id)
            .order_by(DagRun.logical_date.desc())
            .limit(per_dag)
            .lateral("newest")
        )
        query = (
            select(newest.c.dag_id, newest.c.run_id, newest.c.state, newest.c.logical_date)
            .select_from(wanted)
            .join(newest, true())
            .order_by(newest.c.dag_id, newest.c.logical_date.desc())
        )
    else:
        rank = (
            func.row_number()
            .over(partition_by=DagRun.dag_id, order_by=DagRun.logical_date.desc())
            .label("rank")
        )
        ranked = select(DagRun.id, rank).where(DagRun.dag_id.in_(list(dag_ids))).subquery()
        query = (
            select(DagRun.dag_id, DagRun.run_id, DagRun.state, DagRun.logical_date)
            .join(ranked, ranked.c.id == DagRun.id)
            .where(ranked.c.rank <= per_dag)
            .order_by(DagRun.dag_id, DagRun.logical_date.desc())
        )
    found: dict[str, list[RunBrief]] = defaultdict(list)
    for dag_id, run_id, run_state, logical_date in session.execute(query).all():
        found[dag_id].append(RunBrief(run_id=run_id, state=run_state, logical_date=logical_date))
    return found


def shapes_of(session: Session, state: ApiState, dags: Sequence[Dag]) -> dict[str, DagShape]:
    """The shape of each DAG, by id: of the versions not cached, the orders the sync stored
    are read in one query, and the definitions of rows recorded without one in another."""
    found = {d.dag_id: shape for d in dags if (shape := state.shapes.cached(d)) is not None}
    missing = [d.dag_id for d in dags if d.dag_id not in found]
    unordered = []
    if missing:
        rows = session.execute(
            select(Dag.dag_id, Dag.version_hash, Dag.task_order).where(Dag.dag_id.in_(missing))
        ).all()
        for dag_id, version_hash, task_order in rows:
            if task_order is None:
                unordered.append(dag_id)
            else:
                found[dag_id] = state.shapes.add_stored(dag_id, version_hash, task_order)
    if unordered:
        definitions = session.execute(
            select(Dag.dag_id, Dag.version_hash, Dag.serialized).where(Dag.dag_id.in_(unordered))
        ).all()
        for dag_id, version_hash, spec in definitions:
            found[dag_id] = state.shapes.add(dag_id, version_hash, spec)
    return found


def _summary(session: Session, state: ApiState, dag: Dag) -> DagSummary:
    recent = recent_runs(session, [dag.dag_id], RECENT_RUNS).get(dag.dag_id, [])
    error = watch_errors(session, [dag.dag_id]).get(dag.dag_id)
    return dag_summary(dag, recent, state.shapes.shape(dag).task_count, error)


@router.get("", response_model=DagList, dependencies=[CanRead], responses=errors())
def list_dags(session: DbSession, state: State) -> DagList:
    """Active DAGs with their last runs' states, and the DAG files that failed to import."""
    dags = session.scalars(
        select(Dag).options(*WITHOUT_DEFINITION).where(Dag.is_active.is_(True)).order_by(Dag.dag_id)
    ).all()
    broken = session.scalars(
        select(DagFile).where(DagFile.import_error.is_not(None)).order_by(DagFile.fileloc)
    ).all()
    recent = recent_runs(session, [d.dag_id for d in dags], RECENT_RUNS)
    shapes = shapes_of(session, state, dags)
    failing = watch_errors(session)
    return DagList(
        dags=[
            dag_summary(
                d, recent.get(d.dag_id, []), shapes[d.dag_id].task_count, failing.get(d.dag_id)
            )
            for d in dags
            if d.dag_id in shapes
        ],
        import_errors=[
            ImportErrorOut(fileloc=f.fileloc, error=f.import_error or "") for f in broken
        ],
    )


@router.get("/{dag_id}", response_model=DagDetail, dependencies=[CanRead], responses=errors(404))
def get_dag(dag_id: str, session: DbSession, state: State) -> Response:
    """One DAG with its tasks in topological order, and its params' JSON Schema (what
    the web UI's trigger form is built from)."""
    dag = find_dag(session, dag_id)
    tasks = state.shapes.tasks_json(dag)
    summary = _summary(session, state, dag)
    assets = assets_of_dag(session, dag_id)
    definition = state.shapes.definition_json(dag, lambda: params_and_groups_of(session, dag_id))
    content = dag_detail_json(summary, tasks, assets, definition)
    return Response(content, media_type="application/json")


def params_and_groups_of(session: Session, dag_id: str) -> tuple[Any, Any]:
    """The DAG's params (`tasks.params.params_schema`) and task groups
    (`tasks.task_group.groups_json`), read alone, by their paths in its definition (which
    the route does not load: a big DAG's is big); None for none. Once per DAG version and
    API process: the shape cache keeps them."""
    found = session.execute(
        select(Dag.serialized["params"], Dag.serialized["groups"]).where(Dag.dag_id == dag_id)
    ).first()
    return (found[0], found[1]) if found is not None else (None, None)


@router.patch(
    "/{dag_id}", response_model=DagSummary, dependencies=[CanWrite], responses=errors(404)
)
def patch_dag(dag_id: str, body: DagPatch, session: DbSession, state: State) -> DagSummary:
    """Pause or unpause a DAG's schedule (manual runs may still be triggered)."""
    dag = find_dag(session, dag_id)
    dag.is_paused = body.is_paused
    session.flush()
    return _summary(session, state, dag)


GridFormat = Literal["cells", "compact"]

_GRID_DESCRIPTION = """The newest runs (columns, oldest first) by tasks (rows), each cell its state.

`format=cells` (the default) gives each run's cells by task id, a `GridCell` each.
`format=compact` gives the same cells at about a byte each: the rows once
(`task_ids`), and per run its `states` as one string, one character per row (an index into
`legend`, '-' for no TI), plus `tries` and `mapped` only for the rows that need them; what
the web UI reads, and the one to use for big DAGs. With `rows=N` it gives the first N rows
(the web UI asks for the rows it shows): only their TIs are read."""


@router.get(
    "/{dag_id}/grid",
    response_model=Grid | CompactGrid,
    dependencies=[CanRead],
    responses=errors(404),
    description=_GRID_DESCRIPTION,
)
def grid(
    dag_id: str,
    session: DbSession,
    state: State,
    limit: Annotated[int, Query(ge=1, le=100, description="how many of the newest runs")] = 20,
    grid_format: Annotated[
        GridFormat,
        Query(alias="format", description="cells (by task id) or compact (one string per run)"),
    ] = "cells",
    rows: Annotated[
        int | None,
        Query(ge=1, le=1_000_000, description="compact: the first N rows only (default: all)"),
    ] = None,
) -> Grid | Response:
    dag = find_dag(session, dag_id)
    runs = newest_runs(session, dag.dag_id, limit)
    order = state.shapes.shape(dag).order
    active = any(r.state in RUN_UNFINISHED for r in runs)
    if grid_format == "compact":
        task_ids, columns, total = compact_columns(session, runs, order, rows)
        built = compact_grid(dag.dag_id, task_ids, runs, columns, active, total)
        return Response(built.model_dump_json(), media_type="application/json")
    cells = grid_cells(session, runs)
    return Grid(
        dag_id=dag.dag_id,
        task_ids=[*order, *unknown_ids(order, cells.values())],
        runs=[GridRun(**r.header(), cells=cells.get(r.id, {})) for r in runs],
        active=active,
    )
