"""The audit log: who cancelled, marked or annotated a run or a task instance, and when.

`record` adds an event in the caller's transaction (the operation's own, so an
operation and its event commit together or not at all); `latest` reads the newest event
naming a task instance or its run, for `sluice tasks explain`.
"""

from __future__ import annotations

import datetime as dt
import getpass
import socket

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from sluice.scheduler.core.models import AuditEvent
from sluice.scheduler.core.text import storable

WHO_BYTES = 250
NOTE = "note"
"""The action of a note's event; its text is the event's `detail`."""


def cli_user() -> str:
    """Who runs this command: `user@host (cli)`."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no login name (a container's uid without an entry)
        user = "unknown"
    return f"{user}@{socket.gethostname()} (cli)"


def record(
    session: Session,
    *,
    who: str,
    action: str,
    dag_id: str,
    run_id: str,
    now: dt.datetime,
    task_id: str | None = None,
    detail: str | None = None,
) -> AuditEvent:
    """Add one event to the caller's transaction (not committed here)."""
    event = AuditEvent(
        at=now,
        who=storable(who)[:WHO_BYTES],
        action=action,
        dag_id=dag_id,
        run_id=run_id,
        task_id=task_id,
        detail=storable(detail)[:1000] if detail is not None else None,
    )
    session.add(event)
    return event


def latest_note(
    session: Session, dag_id: str, run_id: str, task_id: str | None
) -> AuditEvent | None:
    """The note of a run (`task_id` None) or of one of its task instances: the newest
    `note` event naming exactly it."""
    task = AuditEvent.task_id.is_(None) if task_id is None else AuditEvent.task_id == task_id
    return session.scalar(
        select(AuditEvent)
        .where(
            AuditEvent.dag_id == dag_id,
            AuditEvent.run_id == run_id,
            AuditEvent.action == NOTE,
            task,
        )
        .order_by(AuditEvent.id.desc())
        .limit(1)
    )


def latest(session: Session, dag_id: str, run_id: str, task_id: str) -> AuditEvent | None:
    """The newest operation (not a note) on task `task_id` of the run, or on the run."""
    return session.scalar(
        select(AuditEvent)
        .where(
            AuditEvent.dag_id == dag_id,
            AuditEvent.run_id == run_id,
            AuditEvent.action != NOTE,
            or_(AuditEvent.task_id.is_(None), AuditEvent.task_id == task_id),
        )
        .order_by(AuditEvent.id.desc())
        .limit(1)
    )
