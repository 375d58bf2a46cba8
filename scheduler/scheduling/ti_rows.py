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
    `map_indexes` (-1 each when not given); the new ids by map index."""
    if not task_ids:
        return {}
    indexes = map_indexes if map_indexes is not None else [-1] * len(task_ids)
    trace_id = trace_id_of(run.context_carrier)
    rows = session.execute(
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
            for task_id, index in zip(task_ids, indexes, strict=True)
        ],
    )
    return {index: ti_id for ti_id, index in rows}


BULK_FROM = 64
"""From this many new indexes, PostgreSQL gets them in one INSERT … SELECT over arrays
(three parameters whatever the count) instead of a multi-row VALUES (a dozen parameters a
row, which psycopg rewrites on the client: 1.4 s of 1.9 for 10,000 rows)."""


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
    if not indexes:
        return {}
    if session.get_bind().dialect.name != "postgresql" or len(indexes) < BULK_FROM:
        ids = insert_tis(session, run, dag, [task_id] * len(indexes), indexes)
        start = [ids[i] for i in indexes if i in scheduled]
        move_tis(session, start, TI.SCHEDULED, expect=[TI.NONE], now=now)
        return ids
    trace_id = trace_id_of(run.context_carrier)
    carriers = [json.dumps(new_carrier(trace_id)) for _ in indexes]
    values = ti_values(dag.serialized, task_id)
    given = (
        func.unnest(
            bindparam("b_indexes", type_=ARRAY(Integer)),
            bindparam("b_carriers", type_=ARRAY(Text)),
            bindparam("b_starts", type_=ARRAY(Boolean)),
        )
        .table_valued("map_index", "carrier", "start")
        .render_derived()
    )
    is_scheduled = given.c.start
    chosen = select(
        literal(run.id),
        literal(run.dag_id),
        literal(run.run_id),
        literal(task_id),
        given.c.map_index,
        case((is_scheduled, literal(TI.SCHEDULED.value)), else_=literal(TI.NONE.value)),
        case((is_scheduled, literal(now, type_=TaskInstance.scheduled_at.type)), else_=None),
        literal(0),
        literal(values["max_tries"]),
        literal(values["queue"]),
        literal(values["pool"]),
        literal(values["pool_slots"]),
        literal(values["priority_weight"]),
        literal(values["callback_mask"]),
        cast(given.c.carrier, TaskInstance.context_carrier.type),
        literal(SpanStatus.NOT_STARTED.value),
    )
    columns = [
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
    rows = session.execute(
        insert(table).from_select(columns, chosen).returning(table.c.id, table.c.map_index),
        {
            "b_indexes": indexes,
            "b_carriers": carriers,
            "b_starts": [i in scheduled for i in indexes],
        },
    )
    return {index: ti_id for ti_id, index in rows}
