"""A page of a run's task instances in the DAG's order (`GET …/runs/{run_id}/tasks`).

The order is the DAG's topological task order (task ids it no longer has after it, by
id), a mapped task's indexes by map index; the database cannot sort by it. So the keys of
the matching TIs are read (id, task id, map index: no result, no error), put in order
here, and only the page's rows are read whole, by primary key. The answer is bounded by
the page; the read of keys by the run's TIs (its tasks, each at most max_map_length
indexes).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlalchemy import ColumnElement, select
from sqlalchemy.orm import Session

from sluice.scheduler.core.models import TaskInstance


def order_key(order: Sequence[str]) -> Callable[[str, int], tuple[int, str, int]]:
    """The sort key of a TI, by (task id, map index), in the DAG's task `order`."""
    rank = {task_id: i for i, task_id in enumerate(order)}
    unknown = len(rank)
    return lambda task_id, map_index: (rank.get(task_id, unknown), task_id, map_index)


@dataclass(frozen=True)
class TiPage:
    tis: list[TaskInstance]
    total: int
    """How many TIs match, on every page."""


def page_of_tis(
    session: Session,
    run_pk: int,
    order: Sequence[str],
    where: Sequence[ColumnElement[bool]],
    *,
    limit: int,
    offset: int,
) -> TiPage:
    """The TIs of run `run_pk` matching `where`, in the DAG's `order`, `offset` skipped,
    at most `limit` (a plain read)."""
    rows = session.execute(
        select(TaskInstance.id, TaskInstance.task_id, TaskInstance.map_index).where(
            TaskInstance.dag_run_id == run_pk, *where
        )
    ).all()
    key = order_key(order)
    keys = sorted(rows, key=lambda row: key(row.task_id, row.map_index))
    ids = [row.id for row in keys[offset : offset + limit]]
    if not ids:
        return TiPage([], len(keys))
    page = session.scalars(select(TaskInstance).where(TaskInstance.id.in_(ids))).all()
    by_id = {ti.id: ti for ti in page}
    return TiPage([by_id[i] for i in ids if i in by_id], len(keys))
