"""Due callbacks: taking them to publish, claiming one on a worker, recording its end.

Every move of a callback's `status` is one compare-and-set:
- publish (a scheduler): `pending` (due) → `queued` with a new `token`, rows locked
  SKIP LOCKED so two schedulers never publish the same one; a `queued` one whose message
  was lost (not claimed within the re-publish delay) and a `running` one whose worker was
  lost (no heartbeat within the heartbeat timeout) are published again with a new token;
- claim (a worker): `queued` → `running` WHERE token = the message's: a message published
  before a re-publish, or delivered twice, loses and runs nothing;
- beat (the worker running it, `beat_callbacks`): `last_heartbeat_at` WHERE token = its
  own and still `running`; a beat that finds it no longer so tells the worker to stop it;
- end (the worker that claimed it): `running` → `delivered`, or back to `pending` with a
  backoff if it raised (until its attempts run out: `failed`), or `failed` at once if it
  timed out, WHERE token = its own.
So a callback runs once per publish that a worker claims, and is published again only
when its message or its worker was lost: a live worker's callback is fenced by its
heartbeat, however long it runs (the worker ends it at its timeout). The functions never
commit.
"""

from __future__ import annotations

import datetime as dt
import uuid

from sqlalchemy import and_, func, or_, select, tuple_, update
from sqlalchemy.orm import Session

from sluice.scheduler.core.callback_kinds import ON_DEADLINE_MISSED, Status
from sluice.scheduler.core.messages import CallbackMessage
from sluice.scheduler.core.models import DagRun, DueCallback
from sluice.scheduler.core.retries import delay_after, doubling
from sluice.scheduler.core.states import RUN_UNFINISHED
from sluice.scheduler.core.transitions import short_error
from sluice.scheduler.core.upsert import upsert

CALLBACK_RETRY_MAX_DELAY = 3600.0
"""The longest pause before a callback that raised runs again, in seconds."""


def publish_due(
    session: Session,
    now: dt.datetime,
    *,
    republish_after: float,
    heartbeat_timeout: float,
    max_attempts: int,
    limit: int = 256,
) -> list[CallbackMessage]:
    """Lock (SKIP LOCKED) the callbacks to publish now, give each a new token and mark it
    `queued`; the messages to send after the commit. A `running` one is published again
    only when its worker's last beat (its start, before the first) is older than
    `heartbeat_timeout`."""
    lost_message = now - dt.timedelta(seconds=republish_after)
    lost_worker = now - dt.timedelta(seconds=heartbeat_timeout)
    last_beat = func.coalesce(DueCallback.last_heartbeat_at, DueCallback.started_at)
    rows = session.scalars(
        select(DueCallback)
        .where(
            or_(
                and_(
                    DueCallback.status == Status.PENDING,
                    or_(DueCallback.next_attempt_at.is_(None), DueCallback.next_attempt_at <= now),
                ),
                and_(DueCallback.status == Status.QUEUED, DueCallback.published_at < lost_message),
                and_(DueCallback.status == Status.RUNNING, last_beat < lost_worker),
            )
        )
        .order_by(DueCallback.id)
        .limit(limit)
        .with_for_update(skip_locked=True)
    ).all()
    messages = []
    for row in rows:
        if row.status == Status.RUNNING:  # its worker was lost mid-run: one attempt spent
            row.attempts += 1
            row.error = f"the worker running it was lost (no heartbeat for {heartbeat_timeout:g}s)"
            if row.attempts >= max_attempts:
                row.status, row.finished_at, row.token = Status.FAILED, now, None
                continue
        row.token = str(uuid.uuid4())
        row.status = Status.QUEUED
        row.published_at = now
        messages.append(CallbackMessage(row.id, row.token))
    session.flush()
    return messages


def claim(session: Session, message: CallbackMessage, now: dt.datetime) -> DueCallback | None:
    """`queued` → `running` for this message's token; the row if this worker won."""
    won = session.execute(
        update(DueCallback)
        .where(
            DueCallback.id == message.callback_id,
            DueCallback.token == message.token,
            DueCallback.status == Status.QUEUED,
        )
        .values(status=Status.RUNNING, started_at=now, last_heartbeat_at=now)
        .returning(DueCallback.id)
        .execution_options(synchronize_session=False)
    ).first()
    if won is None:
        return None
    return session.get(DueCallback, message.callback_id, populate_existing=True)


def beat_callbacks(session: Session, running: list[tuple[int, str]], now: dt.datetime) -> set[int]:
    """One beat for the (callback id, token) pairs a worker runs: `last_heartbeat_at` of
    those still `running` on that token. The ids beaten; the others were taken back
    (published again as lost) and are to be stopped."""
    beaten = session.execute(
        update(DueCallback)
        .where(
            tuple_(DueCallback.id, DueCallback.token).in_(running),
            DueCallback.status == Status.RUNNING,
        )
        .values(last_heartbeat_at=now)
        .returning(DueCallback.id)
        .execution_options(synchronize_session=False)
    )
    return set(beaten.scalars())


def finish(
    session: Session,
    message: CallbackMessage,
    now: dt.datetime,
    *,
    error: str | None,
    attempts: int,
    max_attempts: int,
    retry_delay: float,
    retry: bool = True,
) -> str | None:
    """Record the end of the run this worker claimed: `delivered`, or (it raised) `pending`
    again after `retry_delay * 2**(attempts-1)` seconds (`retries.doubling`, at most
    CALLBACK_RETRY_MAX_DELAY), or `failed` when `attempts` (this
    one counted) reach `max_attempts` or, without `retry` (it timed out), at once. The
    status written; None if the claim was lost meanwhile (taken for lost and published
    again)."""
    values: dict[str, object] = {"attempts": attempts, "finished_at": now, "error": None}
    if error is None:
        values["status"] = Status.DELIVERED
    elif attempts >= max_attempts or not retry:
        values.update(status=Status.FAILED, error=short_error(error))
    else:
        delay = delay_after(doubling(retry_delay, CALLBACK_RETRY_MAX_DELAY), attempts)
        values.update(
            status=Status.PENDING,
            error=short_error(error),
            next_attempt_at=now + dt.timedelta(seconds=delay),
            token=None,
        )
    won = session.execute(
        update(DueCallback)
        .where(
            DueCallback.id == message.callback_id,
            DueCallback.token == message.token,
            DueCallback.status == Status.RUNNING,
        )
        .values(**values)
        .returning(DueCallback.id)
        .execution_options(synchronize_session=False)
    ).first()
    return None if won is None else str(values["status"])


def counts(session: Session) -> dict[str, int]:
    """How many callbacks are in each status (every status present, 0 if none)."""
    found = dict(
        session.execute(select(DueCallback.status, func.count()).group_by(DueCallback.status)).all()
    )
    return {status: int(found.get(status, 0)) for status in Status.ALL}


def fire_deadlines(session: Session, now: dt.datetime, limit: int = 256) -> int:
    """Runs whose `deadline_at` has passed, locked FOR NO KEY UPDATE SKIP LOCKED: an
    unfinished one gets its `on_deadline_missed` callback (once: unique key per run and
    deadline), and every one has its `deadline_at` cleared. How many callbacks were due."""
    runs = session.scalars(
        select(DagRun)
        .where(DagRun.deadline_at <= now)
        .order_by(DagRun.deadline_at)
        .limit(limit)
        .with_for_update(skip_locked=True, key_share=True)
    ).all()
    fired = 0
    for run in runs:
        if run.state in RUN_UNFINISHED and run.deadline_at is not None:
            upsert(
                session,
                DueCallback,
                {
                    "dedup_key": f"run:{run.id}:{ON_DEADLINE_MISSED}:{run.deadline_at.isoformat()}",
                    "kind": ON_DEADLINE_MISSED,
                    "dag_id": run.dag_id,
                    "run_id": run.run_id,
                    "dag_run_id": run.id,
                    "try_number": 0,
                    "state": str(run.state),
                    "status": Status.PENDING,
                    "attempts": 0,
                    "created_at": now,
                    "next_attempt_at": now,
                },
                keys=["dedup_key"],
                update=[],
            )
            fired += 1
    if runs:
        session.execute(
            update(DagRun)
            .where(DagRun.id.in_([run.id for run in runs]))
            .values(deadline_at=None)
            .execution_options(synchronize_session=False)
        )
    return fired
