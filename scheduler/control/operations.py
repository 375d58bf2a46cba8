"""What a user asks of Sluice, shared by the CLI and the REST API.

Both front ends call these functions (and `scheduling.clearing`), so a run cleared from
the browser is cleared exactly as `sluice tasks clear` clears it. The functions that take
a session never commit: the caller owns the transaction.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from sluice.broker.app import create_app
from sluice.broker.wakeup import waker_for
from sluice.scheduler.control.inputs import InputError, check_note
from sluice.scheduler.core.models import AuditEvent, Dag, DagRun
from sluice.scheduler.core.queries import audit
from sluice.scheduler.core.settings import Settings
from sluice.scheduler.core.states import RunType
from sluice.scheduler.jobs.celery_poller import revoke_ids
from sluice.scheduler.scheduling.cancelling import Cancelled, cancel_runs
from sluice.scheduler.scheduling.dagrun import create_dagrun

log = logging.getLogger("sluice.control")


class RunFinished(InputError):
    """The operation needs an unfinished run, and this one has ended (a 409 in the API)."""


def trigger_run(
    session: Session,
    dag: Dag,
    *,
    now: dt.datetime,
    logical_date: dt.datetime | None = None,
    run_id: str | None = None,
    conf: dict[str, Any] | None = None,
) -> DagRun:
    """Create a manual run (queued, with its TIs); raises RunExists on a clash."""
    return create_dagrun(
        session,
        dag,
        run_type=RunType.MANUAL,
        logical_date=logical_date or now,
        now=now,
        run_id=run_id,
        conf=conf or {},
    )


def revoke_external_tasks(settings: Settings, task_ids: Sequence[str]) -> None:
    """Revoke the external Celery tasks of cleared CeleryTask tries, after the clear's
    commit, as the poller revokes a timed-out one: a task not started yet never runs; a
    running one may finish, and its result is ignored (the next try has another id).
    Best-effort: a broker error is logged, never raised."""
    if not task_ids:
        return
    revoke_ids(settings, task_ids)


def wake_schedulers(settings: Settings) -> None:
    """Wake every scheduler of the deployment now (best-effort: never raises)."""
    waker = waker_for(settings)
    try:
        waker.wake()
    finally:
        waker.close()


def cancel_run(session: Session, run: DagRun, *, who: str, now: dt.datetime) -> Cancelled:
    """End `run` failed and its unfinished TIs (`scheduling.cancelling`, which takes the
    run's row FOR NO KEY UPDATE and reads its state again under the lock), recording who
    did it in the same transaction; RunFinished if the run has ended, nothing written then.
    The caller commits, then calls `stop_tries`."""
    done = cancel_runs(session, [run.id], now)
    if not done.runs:
        state = session.scalar(select(DagRun.state).where(DagRun.id == run.id))
        raise RunFinished(
            f"run {run.run_id!r} of DAG {run.dag_id!r} has already ended ({state}): "
            "only a queued or running run can be cancelled"
        )
    audit.record(
        session,
        who=who,
        action="cancel",
        dag_id=run.dag_id,
        run_id=run.run_id,
        now=now,
        detail=f"{len(done.attempts)} queued or running tries stopped",
    )
    return done


def stop_tries(settings: Settings, done: Cancelled) -> None:
    """After the commit that ended them: revoke the tries' Celery tasks (a queued message
    is dropped by the workers; a running prefork child is terminated) and the external
    tasks of CeleryTask tries. A late result of one of them loses its compare-and-set.
    Best-effort: a broker error is logged, never raised."""
    if done.attempts:
        try:
            create_app(settings).control.revoke(done.attempts, terminate=True)
        except Exception as exc:
            log.warning("stopping %d tries failed: %s", len(done.attempts), exc)
    revoke_external_tasks(settings, done.external_ids)


def note_on(
    session: Session, run: DagRun, task_id: str | None, text: str, *, who: str, now: dt.datetime
) -> AuditEvent:
    """Set the note of `run` (or of its task `task_id`) to `text`, checked by `check_note`;
    one event in the caller's transaction, returned (its `detail` is the note)."""
    note = check_note(text)
    return audit.record(
        session,
        who=who,
        action=audit.NOTE,
        dag_id=run.dag_id,
        run_id=run.run_id,
        task_id=task_id,
        now=now,
        detail=note,
    )
