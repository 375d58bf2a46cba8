"""Each try of a run's task instances with its queued, start and end times: what the
Gantt chart of a run draws (`GET …/runs/{run_id}/tries`).

What the database keeps of a try, and so what this module gives:
- A TI row holds one set of stamps. `queued_at` is always its current try's (queueing
  writes it with `try_number + 1`). `start_date` and `end_date` are the current try's
  once they are not older than `queued_at`; older ones are still the previous try's
  (queueing resets neither), and are given to that try.
- A try that stored a log (`task_log`) keeps its own start and end (the worker's
  capture), whatever came after; the TI row's stamps win for the current try.
- An earlier try's own row (`task_try`, copied by the database when the TI was reopened
  for the next try: a retry, a clear) gives its outcome, host, queue, start and end;
  a try from before that table (a database upgraded from an older Sluice) has only
  what its log row kept, the rest null.
- The page is bounded: `limit` task instances of the run (and their log rows, by key);
  the run's TIs are read without their results to be put in order.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from sluice.scheduler.api.schemas import RunTries, TaskInstanceTries, TryTimes
from sluice.scheduler.api.ti_pages import order_key
from sluice.scheduler.core.models import DagRun, TaskInstance, TaskTry
from sluice.scheduler.core.queries.task_logs import TryInfo, tries_of_many
from sluice.scheduler.core.states import TI, TaskInstanceState

MAX_TRIES_SHOWN = 100
"""Most tries listed per task instance (its newest): a try number grows with each retry
and each clear, so a page stays bounded however often a task was cleared."""


@dataclass(frozen=True)
class TiStamps:
    """The columns of a TI the Gantt chart reads (no result, no error)."""

    id: int
    task_id: str
    map_index: int
    state: TaskInstanceState
    try_number: int
    hostname: str | None
    queued_at: dt.datetime | None
    start_date: dt.datetime | None
    end_date: dt.datetime | None


def _ours(stamp: dt.datetime | None, queued: dt.datetime | None) -> bool:
    """`stamp` belongs to the try queued at `queued` (not older than its queueing)."""
    return stamp is not None and (queued is None or stamp >= queued)


def try_times(
    ti: TiStamps, logged: Sequence[TryInfo], kept: Sequence[TaskTry] = ()
) -> list[TryTimes]:
    """Tries 1 to `ti.try_number` (at most the newest MAX_TRIES_SHOWN), oldest first."""
    if ti.try_number < 1:
        return []
    by_number = {t.try_number: t for t in logged}
    earlier = {t.try_number: t for t in kept}
    current = ti.try_number
    queued = ti.queued_at
    started = ti.start_date if _ours(ti.start_date, queued) else None
    ended = ti.end_date if _ours(ti.end_date, queued) else None
    before_start = None if started is not None or ti.start_date is None else ti.start_date
    before_end = None if ended is not None or ti.end_date is None else ti.end_date
    holds_its_try = ti.state not in (TI.NONE, TI.SCHEDULED)
    out: list[TryTimes] = []
    for number in range(max(1, current - MAX_TRIES_SHOWN + 1), current + 1):
        log = by_number.get(number)
        if number == current:
            out.append(
                TryTimes(
                    try_number=number,
                    state=ti.state if holds_its_try else None,
                    hostname=ti.hostname or (log.hostname if log else None),
                    queued_at=queued,
                    started_at=started or (log.started_at if log else None),
                    finished_at=ended or (log.finished_at if log else None),
                )
            )
        elif number in earlier:
            row = earlier[number]
            out.append(
                TryTimes(
                    try_number=number,
                    state=row.state,
                    hostname=row.hostname or (log.hostname if log else None),
                    queued_at=row.queued_at,
                    started_at=row.start_date or (log.started_at if log else None),
                    finished_at=row.end_date or (log.finished_at if log else None),
                )
            )
        elif log is not None:
            out.append(
                TryTimes(
                    try_number=number,
                    state=None,
                    hostname=log.hostname,
                    queued_at=None,
                    started_at=log.started_at,
                    finished_at=log.finished_at,
                )
            )
        else:
            previous = number == current - 1
            out.append(
                TryTimes(
                    try_number=number,
                    state=None,
                    hostname=None,
                    queued_at=None,
                    started_at=before_start if previous else None,
                    finished_at=before_end if previous else None,
                )
            )
    return out


def earlier_tries(session: Session, ti_ids: Sequence[int]) -> dict[int, list[TaskTry]]:
    """The kept earlier tries of these TIs (`task_try`, by its key), by TI id; the newest
    MAX_TRIES_SHOWN of each are all `try_times` shows."""
    out: dict[int, list[TaskTry]] = {}
    for start in range(0, len(ti_ids), 500):
        rows = session.scalars(
            select(TaskTry).where(TaskTry.ti_id.in_(ti_ids[start : start + 500]))
        ).all()
        for row in rows:
            out.setdefault(row.ti_id, []).append(row)
    return out


def run_tis(session: Session, run_pk: int) -> list[TiStamps]:
    """The run's TIs, the columns the chart reads."""
    rows = session.execute(
        select(
            TaskInstance.id,
            TaskInstance.task_id,
            TaskInstance.map_index,
            TaskInstance.state,
            TaskInstance.try_number,
            TaskInstance.hostname,
            TaskInstance.queued_at,
            TaskInstance.start_date,
            TaskInstance.end_date,
        ).where(TaskInstance.dag_run_id == run_pk)
    ).all()
    return [TiStamps(*row) for row in rows]


def run_tries(
    session: Session, run: DagRun, order: Sequence[str], *, limit: int, offset: int
) -> RunTries:
    """A page of the run's task instances with their tries, in `order` (the DAG's task
    order; other task ids after it, sorted), a mapped task's by map index."""
    key = order_key(order)
    tis = run_tis(session, run.id)
    tis.sort(key=lambda t: key(t.task_id, t.map_index))
    page = tis[offset : offset + limit]
    ran = [t.id for t in page if t.try_number >= 1]
    logged = tries_of_many(session, ran)
    kept = earlier_tries(session, ran)
    return RunTries(
        dag_id=run.dag_id,
        run_id=run.run_id,
        state=run.state,
        queued_at=run.queued_at,
        start_date=run.start_date,
        end_date=run.end_date,
        total=len(tis),
        limit=limit,
        offset=offset,
        task_instances=[
            TaskInstanceTries(
                task_id=t.task_id,
                map_index=None if t.map_index < 0 else t.map_index,
                state=t.state,
                try_number=t.try_number,
                tries=try_times(t, logged.get(t.id, []), kept.get(t.id, [])),
            )
            for t in page
        ],
    )
