"""Events sent on a key, and the TIs deferred on `Event(key)` they resume.

A sender (`sluice events send`, `POST /api/v1/events`) stores the event and resumes, in
its transaction, every TI whose trigger is `Event` with that key (`resume_on_event`).
An `Event` trigger recorded meanwhile (its TI deferred while the event was being sent,
both transactions in flight) or later does not miss it: a TI resumes on the oldest event
on its key sent at or after its run was queued (`pending_event_for`), which the
triggerers look for at each tick (`resume_pending`) instead of running the trigger.

Guards: every resume is `queries.triggers.resume`, one compare-and-set on the TI
(`deferred` and the trigger's attempt): a sender and a triggerer that both find one TI
resume it once, and only the one that moved it counts it. Events are never consumed: one
event resumes every TI waiting on its key, in any run queued before it was sent.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import ColumnElement, ScalarSelect, select
from sqlalchemy.orm import Session

from sluice.scheduler.core.models import DagRun, Event, TaskInstance, Trigger
from sluice.scheduler.core.queries.triggers import resume
from sluice.tasks.triggers import EVENT_CLASSPATH, RESOLVED_BY_THE_ENGINE


def _trigger_key() -> ColumnElement[str]:
    """SQL: the key of an `Event` trigger row (its kwargs' `key`)."""
    key: ColumnElement[str] = Trigger.kwargs["key"].as_string()
    return key


def _first_event(key: ColumnElement[str] | str, queued_at: Any) -> ScalarSelect[int]:
    """SQL: the id of the oldest event on `key` sent at or after `queued_at`
    (`ix_event_key_sent_at`)."""
    return (
        select(Event.id)
        .where(Event.key == key, Event.sent_at >= queued_at)
        .order_by(Event.sent_at, Event.id)
        .limit(1)
        .scalar_subquery()
    )


def resume_on_event(session: Session, key: str, payload: dict[str, Any], now: dt.datetime) -> int:
    """Store the event (`key`, `payload`, sent `now`) and resume every TI deferred on
    `Event(key)`, its `context["trigger_event"]` the payload; how many this call moved.
    The caller has checked `key` and `payload` (`control.inputs`) and owns the
    transaction."""
    session.add(Event(key=key, payload=payload, sent_at=now))
    session.flush()
    waiting = session.scalars(
        select(Trigger)
        .where(Trigger.classpath == EVENT_CLASSPATH, _trigger_key() == key)
        .order_by(Trigger.id)
    ).all()
    return sum(resume(session, row, payload, now) for row in waiting)


def pending_event_for(session: Session, trigger: Trigger) -> dict[str, Any] | None:
    """The payload of the event an `Event` trigger fires with: the oldest on its key sent
    at or after its TI's run was queued; None if there is none yet."""
    key = trigger.kwargs.get("key")
    if not isinstance(key, str):
        return None
    queued_at = (
        select(DagRun.queued_at)
        .join(TaskInstance, TaskInstance.dag_run_id == DagRun.id)
        .where(TaskInstance.id == trigger.ti_id)
        .scalar_subquery()
    )
    found = session.scalar(select(Event.payload).where(Event.id == _first_event(key, queued_at)))
    return dict(found) if isinstance(found, dict) else None


def resume_pending(session: Session, now: dt.datetime, limit: int = 500) -> list[int]:
    """Resume up to `limit` TIs deferred on `Event` triggers that an event sent since
    their run was queued fires (`pending_event_for`, in one query); the TIs this call
    moved. Trigger rows another transaction holds are skipped (`SKIP LOCKED`): two
    triggerers share the work."""
    first = _first_event(_trigger_key(), DagRun.queued_at)
    rows = session.execute(
        select(Trigger, first.label("event_id"))
        .join(TaskInstance, TaskInstance.id == Trigger.ti_id)
        .join(DagRun, DagRun.id == TaskInstance.dag_run_id)
        .where(Trigger.classpath == EVENT_CLASSPATH, first.is_not(None))
        .order_by(Trigger.id)
        .limit(limit)
        .with_for_update(of=Trigger, skip_locked=True)
    ).all()
    if not rows:
        return []
    payloads: dict[int, dict[str, Any]] = dict(
        session.execute(
            select(Event.id, Event.payload).where(Event.id.in_({r.event_id for r in rows}))
        )
        .tuples()
        .all()
    )
    return [row.ti_id for row, event_id in rows if resume(session, row, payloads[event_id], now)]


def timed_out_events(session: Session, now: dt.datetime, limit: int = 500) -> list[Trigger]:
    """`Event`, `RunFinished` and `CreateRun` triggers past their `timeout_at` (no
    triggerer leases them: each finds these itself and fails their TIs, one
    compare-and-set each)."""
    return list(
        session.scalars(
            select(Trigger)
            .where(
                Trigger.classpath.in_(sorted(RESOLVED_BY_THE_ENGINE)),
                Trigger.timeout_at.is_not(None),
                Trigger.timeout_at <= now,
            )
            .order_by(Trigger.id)
            .limit(limit)
        ).all()
    )
