"""Reads of the tries that ended lately and of the runs they belong to, for the lines
`sluice standalone` prints as a run goes (`cli.task_lines`).

No lock is taken: these are plain reads, in the caller's session, that never commit.
A TI's `end_date` is stamped by every move that ends a try (`transitions._ti_stamps`):
up_for_retry and every terminal state. A try whose TI was reopened before it was read
(a retry due at once, a clear) is read from `task_try`, where the database copied it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Sequence
from typing import Any

from sqlalchemy import null, or_, select
from sqlalchemy.orm import Session

from sluice.scheduler.core.models import DagRun, TaskInstance, TaskTry
from sluice.scheduler.core.states import RUN_UNFINISHED, TI, TI_TERMINAL

ENDED = frozenset(TI_TERMINAL | {TI.UP_FOR_RETRY})
"""The states a try ends in: each stamps the TI's `end_date`. Not `up_for_reschedule`:
it ends a sensor's poke, not its try (the try goes on, its number unchanged, and ends in
one of these), so a line per try stays one line, not one per poke."""

_TI = TaskInstance
_CHUNK = 500
"""Ids per read: below the bound-parameter limits of PostgreSQL and SQLite."""
_COLUMNS = (
    _TI.id,
    _TI.dag_run_id,
    _TI.dag_id,
    _TI.run_id,
    _TI.task_id,
    _TI.map_index,
    _TI.state,
    _TI.try_number,
    _TI.max_tries,
    _TI.start_date,
    _TI.end_date,
    _TI.next_retry_at,
    _TI.error,
)


def tis_ended_since(
    session: Session, run_ids: Collection[int], since: dt.datetime
) -> Sequence[Any]:
    """(id, try_number, state) of the TIs of the runs `run_ids` in an `ENDED` state whose
    `end_date` is `since` or later: the keys alone, cheap to read again and again (no
    time to decode). Read through the index on (dag_run_id, state)."""
    if not run_ids:
        return []
    return session.execute(
        select(_TI.id, _TI.try_number, _TI.state).where(
            _TI.dag_run_id.in_(sorted(run_ids)),
            _TI.state.in_(sorted(ENDED)),
            _TI.end_date >= since,
        )
    ).all()


def tis_by_id(session: Session, ids: Collection[int]) -> list[Any]:
    """The TIs `ids` with what a line says of them (the columns of
    `tries_reopened_since`), in id order."""
    found: list[Any] = []
    ordered = sorted(ids)
    for start in range(0, len(ordered), _CHUNK):
        found += session.execute(
            select(*_COLUMNS).where(_TI.id.in_(ordered[start : start + _CHUNK]))
        ).all()
    return found


def tries_reopened_since(
    session: Session, run_ids: Collection[int], since: dt.datetime
) -> Sequence[Any]:
    """The earlier tries (`task_try`) of the TIs of the runs `run_ids` that ended at
    `since` or later, with the columns of `tis_by_id` (no error nor retry time:
    the TI row holds only its current try's). Read through the TIs' index on
    (dag_run_id, ...) and `task_try`'s primary key."""
    if not run_ids:
        return []
    return session.execute(
        select(
            _TI.id,
            _TI.dag_run_id,
            _TI.dag_id,
            _TI.run_id,
            _TI.task_id,
            _TI.map_index,
            TaskTry.state,
            TaskTry.try_number,
            _TI.max_tries,
            TaskTry.start_date,
            TaskTry.end_date,
            null().label("next_retry_at"),
            null().label("error"),
        )
        .join_from(_TI, TaskTry, TaskTry.ti_id == _TI.id)
        .where(
            _TI.dag_run_id.in_(sorted(run_ids)),
            TaskTry.state.in_(sorted(ENDED)),
            TaskTry.end_date >= since,
        )
        .order_by(TaskTry.end_date, _TI.id)
    ).all()


def runs_to_watch(session: Session, *, after_id: int, also: Collection[int] = ()) -> Sequence[Any]:
    """(id, dag_id, run_id, state) of the runs that are unfinished, created after the run
    `after_id`, or named in `also`. Read through the index on (state, ...) and the
    primary key."""
    clauses = [DagRun.state.in_(sorted(RUN_UNFINISHED)), DagRun.id > after_id]
    if also:
        clauses.append(DagRun.id.in_(sorted(also)))
    return session.execute(
        select(DagRun.id, DagRun.dag_id, DagRun.run_id, DagRun.state)
        .where(or_(*clauses))
        .order_by(DagRun.id)
    ).all()


def last_run_id(session: Session) -> int:
    """The highest run id so far (0 for none)."""
    found = session.scalar(select(DagRun.id).order_by(DagRun.id.desc()).limit(1))
    return int(found or 0)
