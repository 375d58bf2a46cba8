"""New TaskInstance rows: their columns from the task's serialized options, and the bulk
INSERT that creates them (a run's TIs at its creation, a mapped task's indexes).

Nothing is committed here; the caller holds the run (created in its transaction, or its
row locked).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import insert
from sqlalchemy.orm import Session

from sluice.scheduler.core.callback_kinds import mask_of
from sluice.scheduler.core.models import DEFAULT_POOL, Dag, DagRun, TaskInstance
from sluice.scheduler.core.states import TI
from sluice.scheduler.core.tracing_ids import new_carrier, trace_id_of


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
