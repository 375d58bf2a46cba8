"""Watching the external Celery tasks of CeleryTask tries (`tasks.celery_task`).

A CeleryTask try is `running` with `external_id` set while its external task runs on the
user's workers; no Sluice worker holds a slot for it. `poll_external` reads each such
task's state from the Celery result backend and writes the outcome:

- SUCCESS: `success`, its result stored as JSON (`tasks.runtime.check_result`; a result
  that is not JSON or too big fails the try like any task error);
- FAILURE / REVOKED: `up_for_retry` (with `retry_delay_for`) or `failed`, by the TI's tries;
- a backend that cannot be read: the try keeps waiting (heartbeat refreshed), logged;
- anything else (PENDING, RECEIVED, STARTED, RETRY): past the task's `timeout` (counted
  from the try's `start_date`) the external task is revoked and the try fails or is
  retried; before it, `last_heartbeat_at` is refreshed so the dead-TI sweep leaves it be
  (call the poller before the sweep in a loop, and more often than the heartbeat timeout).

Invariants: TIs are locked `FOR UPDATE SKIP LOCKED` (several schedulers poll disjoint
sets); every state write is `move_ti` guarded on `running` and the TI's `attempt_id`; a TI
is polled only when its `external_id` is the one its current attempt sent
(`external_id_for`), so a new try never reads an earlier try's result. The function never
commits: the caller owns the transaction.

Needs a result backend that the user's workers write to: `SLUICE_RESULT_BACKEND`
(`result_app` builds the reading app). Without one, CeleryTask tries fail with that
reason rather than hang.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Sequence
from typing import Any

from celery import Celery
from celery.backends.base import DisabledBackend
from celery.result import AsyncResult
from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from sluice.scheduler.core.db import transaction
from sluice.scheduler.core.models import TaskInstance
from sluice.scheduler.core.queries.versions import task_specs_of
from sluice.scheduler.core.settings import Settings
from sluice.scheduler.core.states import TI
from sluice.scheduler.core.transitions import fail_try, move_ti
from sluice.tasks.celery_task import external_id_for
from sluice.tasks.errors import ResultError
from sluice.tasks.runtime import check_result

log = logging.getLogger(__name__)

FINISHED_FAILED = frozenset({"FAILURE", "REVOKED"})


def result_app(settings: Settings) -> Celery:
    """A Celery app that reads results from `settings.result_backend` (JSON only) and
    revokes through `settings.broker_url`. Its backend is disabled when none is set."""
    app = Celery(
        "sluice-results",
        broker=settings.broker_url,
        backend=settings.result_backend,
        set_as_current=False,
    )
    app.conf.update(
        accept_content=["json"],
        result_accept_content=["json"],
        broker_connection_retry_on_startup=True,
    )
    return app


def lock_external_running(session: Session, limit: int) -> Sequence[TaskInstance]:
    """Running TIs that wait on an external Celery task, locked SKIP LOCKED."""
    stmt = (
        select(TaskInstance)
        .where(TaskInstance.state == TI.RUNNING, TaskInstance.external_id.is_not(None))
        .order_by(TaskInstance.id)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    return session.scalars(stmt).all()


def poll_external(
    session: Session, app: Celery, now: dt.datetime, settings: Settings, limit: int = 256
) -> int:
    """Check the external tasks of running CeleryTask tries; return how many TIs finished."""
    tis = [
        ti
        for ti in lock_external_running(session, limit)
        if ti.attempt_id and ti.external_id == external_id_for(ti.attempt_id)
    ]
    if not tis:
        return 0
    specs = task_specs_of(session, tis)  # of each run's own version
    no_backend = isinstance(app.backend, DisabledBackend)
    finished = 0
    alive: list[int] = []
    for ti in tis:
        spec = specs[ti.id]
        name = ((spec or {}).get("celery") or {}).get("name", "the Celery task")
        if no_backend:
            error = "CeleryTask needs a result backend: set SLUICE_RESULT_BACKEND"
            finished += _fail(session, ti, spec, now, error)
            continue
        assert ti.external_id is not None
        result = AsyncResult(ti.external_id, app=app)
        try:
            state = result.state
        except Exception as exc:  # the result backend is down: keep waiting, try next loop
            log.warning("reading the state of Celery task %s failed: %s", ti.external_id, exc)
            alive.append(ti.id)
            continue
        if state == "SUCCESS":
            finished += _succeed(session, ti, spec, now, name, result.result)
        elif state in FINISHED_FAILED:
            error = f"{name} [{ti.external_id}] {_describe(state, result.result)}"
            finished += _fail(session, ti, spec, now, error)
        elif (limit_s := _timeout(spec)) is not None and _elapsed(ti, now) > limit_s:
            _revoke(result)
            error = (
                f"{name} [{ti.external_id}] timed out after {limit_s:g}s (state {state}); revoked"
            )
            finished += _fail(session, ti, spec, now, error)
        else:
            alive.append(ti.id)
    if alive:
        session.execute(
            update(TaskInstance)
            .where(TaskInstance.id.in_(alive), TaskInstance.state == TI.RUNNING)
            .values(last_heartbeat_at=now)
            .execution_options(synchronize_session=False)
        )
    return finished


_apps: dict[Settings, Celery] = {}


def poll_once(
    factory: sessionmaker[Session],
    settings: Settings,
    now: dt.datetime,
    app: Celery | None = None,
) -> int:
    """`poll_external` in a transaction of its own: what a scheduler loop calls.

    Without `app`, the result app of `settings` (built once per process and settings).
    """
    with transaction(factory) as session:
        return poll_external(session, app or _app_for(settings), now, settings)


def _app_for(settings: Settings) -> Celery:
    """The result app of `settings`, built once per process and settings."""
    app = _apps.get(settings)
    if app is None:
        app = _apps[settings] = result_app(settings)
    return app


def revoke_ids(settings: Settings, task_ids: Sequence[str]) -> None:
    """Revoke Celery tasks by id through `settings.broker_url` (without terminating, as
    `_revoke`); a broker error is logged, not raised."""
    try:
        _app_for(settings).control.revoke(list(task_ids))
    except Exception as exc:
        log.warning("revoking Celery tasks %s failed: %s", ", ".join(task_ids), exc)


def _revoke(result: AsyncResult) -> None:
    """Revoke without terminating: a task not started yet never runs; a running one may
    finish, and its result is ignored. A broker error is logged, not raised."""
    try:
        result.revoke()
    except Exception as exc:
        log.warning("revoking Celery task %s failed: %s", result.id, exc)


def _timeout(spec: dict[str, Any] | None) -> float | None:
    value = ((spec or {}).get("celery") or {}).get("timeout")
    return None if value is None else float(value)


def _elapsed(ti: TaskInstance, now: dt.datetime) -> float:
    return 0.0 if ti.start_date is None else (now - ti.start_date).total_seconds()


def _describe(state: str, value: Any) -> str:
    if state == "REVOKED":
        return "was revoked"
    if isinstance(value, BaseException):
        text = " ".join(str(value).split())
        return (
            f"failed: {type(value).__name__}: {text}" if text else f"failed: {type(value).__name__}"
        )
    return f"failed: {value!r}"


def _succeed(
    session: Session,
    ti: TaskInstance,
    spec: dict[str, Any] | None,
    now: dt.datetime,
    name: str,
    value: Any,
) -> int:
    try:
        encoded = check_result(value, ti.task_id)
    except ResultError as exc:
        return _fail(session, ti, spec, now, f"{name} [{ti.external_id}] {exc}")
    won = move_ti(
        session,
        ti.id,
        TI.SUCCESS,
        expect=[TI.RUNNING],
        now=now,
        attempt_id=ti.attempt_id,
        values={"result": encoded, "error": None, "next_retry_at": None},
    )
    if won:
        log.info("TI %s.%s.%s: %s succeeded", ti.dag_id, ti.run_id, ti.task_id, name)
    return int(won)


def _fail(
    session: Session, ti: TaskInstance, spec: dict[str, Any] | None, now: dt.datetime, error: str
) -> int:
    """running -> up_for_retry (tries left) or failed, guarded on the TI's attempt."""
    new = fail_try(session, ti, spec, now, error)
    retry = new is TI.UP_FOR_RETRY
    won = new is not None
    if won:
        log.warning(
            "TI %s.%s.%s, try %s: %s%s",
            ti.dag_id,
            ti.run_id,
            ti.task_id,
            ti.try_number,
            error,
            ", will retry" if retry else "",
        )
    return int(won)
