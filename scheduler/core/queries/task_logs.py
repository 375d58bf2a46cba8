"""Queries over `task_log` rows: the captured output of each try of a TaskInstance.

Lock rule: none. A try's row is written only by the worker running that try
(an upsert on its primary key, `ti_id` + `try_number`); readers take no locks.
The functions take a session and never commit.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from sluice.scheduler.core.models import TaskLog
from sluice.scheduler.core.upsert import upsert


@dataclass(frozen=True)
class LogSnapshot:
    """What a writer stores for one try at one moment."""

    ti_id: int
    try_number: int
    attempt_id: str | None
    hostname: str | None
    content: str
    dropped_lines: int
    started_at: dt.datetime
    finished_at: dt.datetime | None


@dataclass(frozen=True)
class TryInfo:
    """One try as its log row records it, without the log's text."""

    try_number: int
    attempt_id: str | None
    hostname: str | None
    started_at: dt.datetime
    updated_at: dt.datetime
    finished_at: dt.datetime | None
    dropped_lines: int


def save_task_log(session: Session, snapshot: LogSnapshot, *, now: dt.datetime) -> None:
    """Insert or replace the log row of (`ti_id`, `try_number`)."""
    upsert(
        session,
        TaskLog,
        {
            "ti_id": snapshot.ti_id,
            "try_number": snapshot.try_number,
            "attempt_id": snapshot.attempt_id,
            "hostname": snapshot.hostname,
            "content": snapshot.content,
            "dropped_lines": snapshot.dropped_lines,
            "started_at": snapshot.started_at,
            "updated_at": now,
            "finished_at": snapshot.finished_at,
        },
        keys=["ti_id", "try_number"],
        update=["attempt_id", "hostname", "content", "dropped_lines", "updated_at", "finished_at"],
    )


def append_task_log(
    session: Session,
    *,
    ti_id: int,
    try_number: int,
    text: str,
    dropped_lines: int,
    now: dt.datetime,
) -> bool:
    """Append `text` to the stored log of (`ti_id`, `try_number`); False if it has no row
    yet. A running try's flush costs what it adds, not the whole log."""
    done = session.execute(
        update(TaskLog)
        .where(TaskLog.ti_id == ti_id, TaskLog.try_number == try_number)
        .values(content=TaskLog.content + text, dropped_lines=dropped_lines, updated_at=now)
        .execution_options(synchronize_session=False)
    )
    return bool(done.rowcount)  # type: ignore[attr-defined]


def task_log_of(session: Session, ti_id: int, try_number: int) -> TaskLog | None:
    """The stored log of one try, or None if that try stored nothing."""
    return session.get(TaskLog, (ti_id, try_number))


_TRY_COLUMNS = (
    TaskLog.try_number,
    TaskLog.attempt_id,
    TaskLog.hostname,
    TaskLog.started_at,
    TaskLog.updated_at,
    TaskLog.finished_at,
    TaskLog.dropped_lines,
)
"""A `TryInfo`'s columns, in its order."""


def tries_of(session: Session, ti_id: int) -> Sequence[TryInfo]:
    """The tries of a TaskInstance that stored a log, oldest first."""
    rows = session.execute(
        select(*_TRY_COLUMNS).where(TaskLog.ti_id == ti_id).order_by(TaskLog.try_number)
    ).all()
    return [TryInfo(*row) for row in rows]


def tries_of_many(session: Session, ti_ids: Sequence[int]) -> dict[int, list[TryInfo]]:
    """The tries that stored a log of each of these TaskInstances, oldest first, by TI id
    (one query per 5000 ids, by the primary key)."""
    found: dict[int, list[TryInfo]] = {}
    ids = list(ti_ids)
    for start in range(0, len(ids), 5000):
        rows = session.execute(
            select(TaskLog.ti_id, *_TRY_COLUMNS)
            .where(TaskLog.ti_id.in_(ids[start : start + 5000]))
            .order_by(TaskLog.ti_id, TaskLog.try_number)
        ).all()
        for row in rows:
            found.setdefault(row[0], []).append(TryInfo(*row[1:]))
    return found
