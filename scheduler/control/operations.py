"""What a user asks of Sluice, shared by the CLI and the REST API.

Both front ends call these functions (and `scheduling.clearing`), so a run cleared from
the browser is cleared exactly as `sluice tasks clear` clears it. The functions that take
a session never commit: the caller owns the transaction.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from sqlalchemy.orm import Session

from sluice.broker.wakeup import waker_for
from sluice.scheduler.core.models import Dag, DagRun
from sluice.scheduler.core.settings import Settings
from sluice.scheduler.core.states import RunType
from sluice.scheduler.jobs.celery_poller import revoke_ids
from sluice.scheduler.scheduling.dagrun import create_dagrun


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
