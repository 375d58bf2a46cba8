"""New TaskInstance rows: their columns from the task's serialized options, and the bulk
INSERT that creates them (a run's TIs at its creation, a mapped task's indexes).

Nothing is committed here; the caller holds the run (created in its transaction, or its
row locked).
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from sqlalchemy import (
    Boolean,
    Integer,
    Table,
    Text,
    bindparam,
    case,
    cast,
    func,
    insert,
    literal,
    select,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import Session

from sluice.scheduler.core.callback_kinds import mask_of
from sluice.scheduler.core.models import DEFAULT_POOL, Dag, DagRun, TaskInstance
from sluice.scheduler.core.states import TI, SpanStatus
from sluice.scheduler.core.tracing_ids import new_carrier, trace_id_of
from sluice.scheduler.core.transitions import move_tis


def ti_values(spec: dict[str, Any], task_id: str) -> dict[str, Any]:
    """Columns of a new TaskInstance taken from its task's serialized options."""
    task = spec["tasks"][task_id]
    return {
        "queue": task.get("queue") or "default",
        "pool": task.get("pool") or DEFAULT_POOL,
        "pool_slots": int(task.get("pool_slots") or 1),
        "priority_weight": int(task.get("priority_weight") or 1),
        "max_tries": int(task.get("retries") or 0) + 1,
        "callback_mask": mask_of(task.get("callbacks") or ()),
    }


def insert_tis(
    session: Session,
    run: DagRun,
    dag: Dag,
    task_ids: list[str],
    map_indexes: list[int] | None = None,
) -> dict[int, int]:
    """One bulk INSERT of TIs (state `none`, fresh span ids) for `task_ids` of `run`, at
    `map_indexes` (-1 each when not given); the new ids by map index (meaningful for the
    indexes of one task)."""
    indexes = map_indexes if map_indexes is not None else [-1] * len(task_ids)
    return _insert(session, run, dag, list(zip(task_ids, indexes, strict=True)))


def insert_indexes(
    session: Session,
    run: DagRun,
    dag: Dag,
    task_id: str,
    indexes: list[int],
    *,
    scheduled: frozenset[int] = frozenset(),
    now: dt.datetime,
) -> dict[int, int]:
    """Insert the TIs of `task_id`'s map `indexes` in `run`: in `scheduled` (stamped at
    `now`) for those in `scheduled`, else `none`; their ids by index. A new TI is not a
    move: no state of it is overwritten, and no trigger cares for these two states."""
    return _insert(session, run, dag, [(task_id, i) for i in indexes], scheduled, now)


BULK_FROM = 64
"""From this many new TIs, PostgreSQL gets them in one INSERT … SELECT over arrays (one
parameter a column whatever the count) instead of a multi-row VALUES (a dozen parameters
a row, which psycopg rewrites on the client: 1.4 s of 1.9 for 10,000 rows)."""


def _insert(
    session: Session,
    run: DagRun,
    dag: Dag,
    rows: list[tuple[str, int]],
    scheduled: frozenset[int] = frozenset(),
    now: dt.datetime | None = None,
) -> dict[int, int]:
    """Insert TIs (task id, map index) of `run`, those whose index is in `scheduled`
    already `scheduled` at `now`; the new ids by map index."""
    if not rows:
        return {}
    trace_id = trace_id_of(run.context_carrier)
    if session.get_bind().dialect.name != "postgresql" or len(rows) < BULK_FROM:
        found = session.execute(
            insert(TaskInstance).returning(TaskInstance.id, TaskInstance.map_index),
            [
                {
                    "dag_run_id": run.id,
                    "dag_id": run.dag_id,
                    "run_id": run.run_id,
                    "task_id": task_id,
                    "map_index": index,
                    "state": TI.NONE,
                    "context_carrier": new_carrier(trace_id),
                    **ti_values(dag.serialized, task_id),
                }
                for task_id, index in rows
            ],
        )
        ids = {index: ti_id for ti_id, index in found}
        if scheduled:
            assert now is not None
            start = [ids[i] for i in ids if i in scheduled]
            move_tis(session, start, TI.SCHEDULED, expect=[TI.NONE], now=now)
        return ids
    return _insert_over_arrays(session, run, dag, rows, scheduled, now, trace_id)


_ARRAYS = (
    ("task_id", Text),
    ("map_index", Integer),
    ("carrier", Text),
    ("start", Boolean),
    ("max_tries", Integer),
    ("queue", Text),
    ("pool", Text),
    ("pool_slots", Integer),
    ("priority_weight", Integer),
    ("callback_mask", Integer),
)


def _insert_over_arrays(
    session: Session,
    run: DagRun,
    dag: Dag,
    rows: list[tuple[str, int]],
    scheduled: frozenset[int],
    now: dt.datetime | None,
    trace_id: str | None,
) -> dict[int, int]:
    """PostgreSQL: `rows` in one INSERT … SELECT FROM unnest() of one array a column."""
    columns: dict[str, list[Any]] = {name: [] for name, _ in _ARRAYS}
    options: dict[str, dict[str, Any]] = {}
    for task_id, index in rows:
        values = options.get(task_id)
        if values is None:
            values = options[task_id] = ti_values(dag.serialized, task_id)
        columns["task_id"].append(task_id)
        columns["map_index"].append(index)
        columns["carrier"].append(json.dumps(new_carrier(trace_id)))
        columns["start"].append(index in scheduled)
        for name in ("max_tries", "queue", "pool", "pool_slots", "priority_weight"):
            columns[name].append(values[name])
        columns["callback_mask"].append(values["callback_mask"])
    given = (
        func.unnest(*(bindparam(f"b_{name}", type_=ARRAY(kind)) for name, kind in _ARRAYS))
        .table_valued(*(name for name, _ in _ARRAYS))
        .render_derived()
    )
    c = given.c
    chosen = select(
        literal(run.id),
        literal(run.dag_id),
        literal(run.run_id),
        c.task_id,
        c.map_index,
        case((c.start, literal(TI.SCHEDULED.value)), else_=literal(TI.NONE.value)),
        case((c.start, literal(now, type_=TaskInstance.scheduled_at.type)), else_=None),
        literal(0),
        c.max_tries,
        c.queue,
        c.pool,
        c.pool_slots,
        c.priority_weight,
        c.callback_mask,
        cast(c.carrier, TaskInstance.context_carrier.type),
        literal(SpanStatus.NOT_STARTED.value),
    )
    targets = [
        "dag_run_id",
        "dag_id",
        "run_id",
        "task_id",
        "map_index",
        "state",
        "scheduled_at",
        "try_number",
        "max_tries",
        "queue",
        "pool",
        "pool_slots",
        "priority_weight",
        "callback_mask",
        "context_carrier",
        "span_status",
    ]
    table: Table = TaskInstance.__table__  # type: ignore[assignment]
    found = session.execute(
        insert(table).from_select(targets, chosen).returning(table.c.id, table.c.map_index),
        {f"b_{name}": values for name, values in columns.items()},
    )
    return {index: ti_id for ti_id, index in found}
