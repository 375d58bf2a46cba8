"""Finding one task instance of a run by task id and map index, as users name it.

A plain SELECT in the caller's session (no lock). An unmapped task has one TI (map index
-1); a mapped task's TIs are its indexes, so a lookup without an index of a mapped task
is refused with a line that says which indexes it has.
"""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from sluice.scheduler.core.models import TaskInstance


class TiNotFound(LookupError):
    """No such TI; the message is one line for the user."""


def find_task_instance(
    session: Session,
    run_pk: int,
    task_id: str,
    map_index: int | None = None,
    *,
    named_by: str = "map_index",
) -> TaskInstance:
    """The TI of task `task_id` in run `run_pk` at `map_index` (None: the task's only TI,
    the unmapped one). Raises TiNotFound ("has no task …", to follow the run's name),
    naming the task's indexes and how to give one (`named_by`) when it is mapped."""
    wanted = -1 if map_index is None else map_index
    ti = session.scalar(
        select(TaskInstance).where(
            TaskInstance.dag_run_id == run_pk,
            TaskInstance.task_id == task_id,
            TaskInstance.map_index == wanted,
        )
    )
    if ti is not None:
        return ti
    low, high, count = session.execute(
        select(
            func.min(TaskInstance.map_index),
            func.max(TaskInstance.map_index),
            func.count(),
        ).where(TaskInstance.dag_run_id == run_pk, TaskInstance.task_id == task_id)
    ).one()
    if not count:
        raise TiNotFound(f"has no task {task_id!r}")
    if map_index is None:
        raise TiNotFound(
            f"has task {task_id!r} mapped: name one of its indexes {low}..{high} with {named_by}"
        )
    if low < 0:
        raise TiNotFound(f"has task {task_id!r} not mapped (or not expanded yet): no {named_by}")
    raise TiNotFound(f"has no index {map_index} of task {task_id!r} (its indexes: {low}..{high})")
