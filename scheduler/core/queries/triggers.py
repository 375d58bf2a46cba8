"""The `trigger` rows of deferred TIs: written by the worker that defers, leased and
resumed (or failed) by the triggerers (`jobs.triggerer`).

Locks and guards: a triggerer takes triggers `FOR UPDATE SKIP LOCKED` among those with no
lease or a lapsed one, and renews its leases with its heartbeat; a trigger whose triggerer
died is taken by another once its lease lapses. A resume or a failure is one
compare-and-set on the TI (`deferred` and the trigger's `attempt_id`): two triggerers that
both fire it during a lease overlap resume it once; the loser changes nothing.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from sqlalchemy import delete, or_, select, update
from sqlalchemy.orm import Session

from sluice.scheduler.core.models import TaskInstance, TaskLog, Trigger
from sluice.scheduler.core.queries.task_logs import task_log_of
from sluice.scheduler.core.queries.versions import task_specs_of
from sluice.scheduler.core.states import TI
from sluice.scheduler.core.transitions import fail_try, move_ti
from sluice.tasks.triggers import RESOLVED_BY_THE_ENGINE


def add_trigger(
    session: Session, ti_id: int, attempt_id: str, trigger: dict[str, Any], now: dt.datetime
) -> None:
    """The trigger of TI `ti_id`, deferred by its attempt `attempt_id` (in the deferring
    write's transaction; an older row of the TI is replaced)."""
    session.execute(delete(Trigger).where(Trigger.ti_id == ti_id))
    session.add(
        Trigger(
            ti_id=ti_id,
            attempt_id=attempt_id,
            classpath=trigger["classpath"],
            kwargs=trigger["kwargs"],
            created_at=now,
            timeout_at=trigger["timeout_at"],
        )
    )


def trigger_event_of(waiting: Any, try_number: int) -> Any:
    """`context["trigger_event"]` of a try: what its trigger fired with, when the TI's
    `waiting` holds an event of this try; else None (a first run, a new try)."""
    if isinstance(waiting, dict) and waiting.get("try") == try_number and "event" in waiting:
        return waiting["event"]
    return None


def waiting_kinds(session: Session, now: dt.datetime) -> tuple[frozenset[str], bool]:
    """What waits now, in one query: the class paths of the engine's triggers present
    (`RESOLVED_BY_THE_ENGINE`), and whether a trigger a triggerer runs has no lease or
    a lapsed one. A tick looks for no more than this says (an idle triggerer: one query)."""
    rows = session.execute(
        select(Trigger.classpath)
        .where(
            or_(
                Trigger.classpath.in_(sorted(RESOLVED_BY_THE_ENGINE)),
                Trigger.lease_until.is_(None),
                Trigger.lease_until < now,
            )
        )
        .distinct()
    ).scalars()
    found = set(rows)
    return frozenset(found & RESOLVED_BY_THE_ENGINE), bool(found - RESOLVED_BY_THE_ENGINE)


def lease_triggers(
    session: Session, triggerer_id: int, capacity: int, now: dt.datetime, lease: float
) -> list[Trigger]:
    """Up to `capacity` triggers with no lease or a lapsed one, leased to `triggerer_id`
    until `now + lease` (rows taken `SKIP LOCKED`: two triggerers never take one row at
    once). `Event`, `RunFinished` and `CreateRun` triggers are never leased: nothing runs
    them, the database fires them (`queries.events`, `queries.run_waits`,
    `scheduling.triggered_runs`)."""
    if capacity <= 0:
        return []
    rows = session.scalars(
        select(Trigger)
        .where(
            or_(Trigger.lease_until.is_(None), Trigger.lease_until < now),
            Trigger.classpath.not_in(sorted(RESOLVED_BY_THE_ENGINE)),
        )
        .order_by(Trigger.id)
        .limit(capacity)
        .with_for_update(skip_locked=True)
    ).all()
    until = now + dt.timedelta(seconds=lease)
    for row in rows:
        row.triggerer_id = triggerer_id
        row.lease_until = until
    return list(rows)


def renew_leases(
    session: Session, triggerer_id: int, ids: Sequence[int], now: dt.datetime, lease: float
) -> set[int]:
    """Extend this triggerer's leases of `ids`; the ids it still holds (a trigger another
    triggerer took after a lapse, or one that is gone, is no longer this one's)."""
    if not ids:
        return set()
    held = session.scalars(
        update(Trigger)
        .where(Trigger.id.in_(list(ids)), Trigger.triggerer_id == triggerer_id)
        .values(lease_until=now + dt.timedelta(seconds=lease))
        .returning(Trigger.id)
        .execution_options(synchronize_session=False)
    ).all()
    return set(held)


def resume(session: Session, trigger: Trigger, payload: Any, now: dt.datetime) -> bool:
    """deferred -> scheduled for the trigger's attempt, its `waiting` holding the event
    for the resumed try; the trigger row goes. Whether the TI moved (False: it had moved
    already: another triggerer fired it, a user cleared or marked it). The try number
    goes back one, as queueing the resumed try adds it again: a resume is no new try."""
    waiting = session.scalar(select(TaskInstance.waiting).where(TaskInstance.id == trigger.ti_id))
    try_number = waiting.get("try") if isinstance(waiting, dict) else None
    moved = move_ti(
        session,
        trigger.ti_id,
        TI.SCHEDULED,
        expect=[TI.DEFERRED],
        attempt_id=trigger.attempt_id,
        now=now,
        values={
            "waiting": {"try": try_number, "event": payload},
            "next_retry_at": None,
            "try_number": TaskInstance.try_number - 1,
        },
    )
    session.execute(delete(Trigger).where(Trigger.id == trigger.id))
    return bool(moved)


def fail_deferred(session: Session, trigger: Trigger, error: str, now: dt.datetime) -> TI | None:
    """The trigger's TI fails with `error` (a trigger that raised, a timeout) as any try
    fails (`transitions.fail_try`, on the trigger's attempt: `up_for_retry` by its run's
    version of the task, or `failed`), `error` appended to the try's log. The trigger row
    goes. The state it moved to; None if it had moved already."""
    row = session.get(TaskInstance, trigger.ti_id)
    session.execute(delete(Trigger).where(Trigger.id == trigger.id))
    if row is None or row.attempt_id != trigger.attempt_id:
        return None
    spec = task_specs_of(session, [row]).get(row.id)
    new = fail_try(session, row, spec, now, error, expect=TI.DEFERRED)
    if new is None:
        return None
    try_number = row.try_number  # the deferred try's own number
    line = f"{now.isoformat()} ERROR sluice.triggerer: {error}\n"
    stored = task_log_of(session, trigger.ti_id, try_number)
    if stored is not None:  # the try's log ends with why it failed
        stored.content = (stored.content or "") + line
        stored.updated_at = now
    else:
        session.add(
            TaskLog(
                ti_id=trigger.ti_id,
                try_number=try_number,
                attempt_id=trigger.attempt_id,
                content=line,
                started_at=now,
                updated_at=now,
                finished_at=now,
            )
        )
    return new


def drop_orphans(session: Session) -> int:
    """Trigger rows whose TI is no longer deferred on their attempt (cleared, marked,
    cancelled meanwhile): deleted; how many."""
    stale = (
        select(Trigger.id)
        .join(TaskInstance, TaskInstance.id == Trigger.ti_id)
        .where(
            or_(TaskInstance.state != TI.DEFERRED, TaskInstance.attempt_id != Trigger.attempt_id)
        )
    )
    gone = session.execute(
        delete(Trigger).where(Trigger.id.in_(stale)).execution_options(synchronize_session=False)
    )
    return int(gone.rowcount or 0)  # type: ignore[attr-defined]
