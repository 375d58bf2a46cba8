"""New TaskInstance rows: their columns from the task's serialized options, and the bulk
INSERT that creates them (a run's TIs at its creation, a mapped task's indexes).

Nothing is committed here; the caller holds the run (created in its transaction, or its
row locked).
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from sqlalchemy import insert, text
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
        "concurrency": (task.get("concurrency") or {}).get("name"),
        "concurrency_limit": (task.get("concurrency") or {}).get("limit"),
        "rate_limit": (task.get("rate_limit") or {}).get("name"),
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
    if session.get_bind().dialect.name == "postgresql":
        return _insert_over_json(session, run, dag, rows, scheduled, now, trace_id)
    # SQLite: the ORM's multi-row insert, then the moves to scheduled
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


_OVER_JSON = text(
    f"""
INSERT INTO task_instance (dag_run_id, dag_id, run_id, task_id, map_index, state,
    scheduled_at, try_number, max_tries, queue, pool, pool_slots, priority_weight,
    callback_mask, context_carrier, span_status, concurrency, concurrency_limit, rate_limit)
SELECT CAST(:run_pk AS BIGINT), CAST(:dag_id AS TEXT), CAST(:run_id AS TEXT), r.task_id,
       r.map_index, CASE WHEN r.start THEN '{TI.SCHEDULED.value}' ELSE '{TI.NONE.value}' END,
       CASE WHEN r.start THEN CAST(:now AS TIMESTAMPTZ) END, 0, r.max_tries, r.queue,
       r.pool, r.pool_slots, r.priority_weight, r.callback_mask, r.carrier,
       '{SpanStatus.NOT_STARTED.value}', r.concurrency, r.concurrency_limit, r.rate_limit
FROM json_to_recordset(CAST(:rows AS JSON)) AS r(task_id TEXT, map_index INTEGER,
    start BOOLEAN, max_tries INTEGER, queue TEXT, pool TEXT, pool_slots INTEGER,
    priority_weight INTEGER, callback_mask INTEGER, carrier JSON, concurrency TEXT,
    concurrency_limit INTEGER, rate_limit TEXT)
RETURNING id, map_index
"""
)
"""New TIs of one run from one JSON array of rows: the statement's text is the same for
any count (psycopg converts it once; a multi-row VALUES of a dozen parameters a row was
rewritten on the client at every call: a fifth of a REST trigger's CPU, 1.4 s of 1.9 for
10,000 rows), and its one parameter is a string (an array a column was dumped element by
element in Python)."""


def _insert_over_json(
    session: Session,
    run: DagRun,
    dag: Dag,
    rows: list[tuple[str, int]],
    scheduled: frozenset[int],
    now: dt.datetime | None,
    trace_id: str | None,
) -> dict[int, int]:
    """PostgreSQL: `rows` in one INSERT … SELECT FROM json_to_recordset()."""
    options: dict[str, dict[str, Any]] = {}
    given = []
    for task_id, index in rows:
        values = options.get(task_id)
        if values is None:
            values = options[task_id] = ti_values(dag.serialized, task_id)
        carrier = new_carrier(trace_id)
        given.append(
            {
                "task_id": task_id,
                "map_index": index,
                "start": index in scheduled,
                "carrier": carrier,
                **values,
            }
        )
    found = session.execute(
        _OVER_JSON,
        {
            "run_pk": run.id,
            "dag_id": run.dag_id,
            "run_id": run.run_id,
            "now": now,
            "rows": json.dumps(given),
        },
    )
    return {index: ti_id for ti_id, index in found}
