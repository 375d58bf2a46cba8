"""What a user asks of Sluice, shared by the CLI and the REST API.

Both front ends call these functions (and `scheduling.clearing`), so a run cleared from
the browser is cleared exactly as `sluice tasks clear` clears it. The functions that take
a session never commit: the caller owns the transaction. Celery and Redis are imported
by the functions that use them, so a CLI command that needs neither starts faster.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Sequence
from typing import Any

from cachetools import FIFOCache
from sqlalchemy import select
from sqlalchemy.orm import Session

from sluice.scheduler.control.inputs import InputError, check_note
from sluice.scheduler.core.dag_cache import dag_of_run
from sluice.scheduler.core.models import AuditEvent, Dag, DagRun
from sluice.scheduler.core.queries import audit
from sluice.scheduler.core.settings import Settings
from sluice.scheduler.core.states import DagRunState, RunType, TaskInstanceState
from sluice.scheduler.scheduling.cancelling import Cancelled, cancel_runs
from sluice.scheduler.scheduling.clearing import UnknownTask
from sluice.scheduler.scheduling.dagrun import create_dagrun
from sluice.scheduler.scheduling.marking import (
    AlreadyInState,
    Marked,
    mark_run,
    mark_task_instances,
)
from sluice.tasks.params import ParamsError


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
    """Create a manual run (queued, with its TIs); raises RunExists on a clash, and
    InputError (one line, nothing written) for a conf its DAG's params refuse."""
    try:
        return create_dagrun(
            session,
            dag,
            run_type=RunType.MANUAL,
            logical_date=logical_date or now,
            now=now,
            run_id=run_id,
            conf=conf or {},
        )
    except ParamsError as exc:
        raise InputError(str(exc)) from None


def revoke_external_tasks(settings: Settings, task_ids: Sequence[str]) -> None:
    """Revoke the external Celery tasks of cleared CeleryTask tries, after the clear's
    commit, as the poller revokes a timed-out one: a task not started yet never runs; a
    running one may finish, and its result is ignored (the next try has another id).
    Best-effort: a broker error is logged, never raised."""
    if not task_ids:
        return
    from sluice.scheduler.jobs.celery_poller import revoke_ids  # Celery: only when needed

    revoke_ids(settings, task_ids)


class NothingToMark(InputError):
    """What a mark asks is the state already (a 409 in the API)."""


class UnknownTaskId(InputError):
    """A task the run's DAG does not have (a 404 in the API)."""


def wake_schedulers(settings: Settings, run_pk: int | None = None) -> None:
    """Wake every scheduler of the deployment now, naming the run with news if given
    (best-effort: never raises). One waker per deployment and process is kept (the API
    wakes them at every trigger: a Redis connection each time cost a fifth of it)."""
    _publisher(settings).wake(run_pk)


def ready_to_wake(settings: Settings) -> None:
    """Make this process's waker before a change it will announce: a command calls it
    before its transaction, so that after the commit the wake-up goes out at once (the
    waker's import, Redis's client, is tens of milliseconds a process pays once; paid
    after the commit, the run would wait for it)."""
    _publisher(settings)


class _Wakers(FIFOCache[Settings, Any]):
    """Wakers kept per process, one per deployment's settings: the oldest leaves first
    and is closed as it leaves (cachetools' `popitem`, which every eviction goes through)."""

    def popitem(self) -> tuple[Settings, Any]:
        settings, waker = super().popitem()
        waker.close()
        return settings, waker


_PUBLISHERS = _Wakers(maxsize=8)
_PUBLISHERS_LOCK = threading.Lock()


def _publisher(settings: Settings) -> Any:
    from sluice.broker.wakeup import waker_for  # Redis: only when needed

    with _PUBLISHERS_LOCK:
        waker = _PUBLISHERS.get(settings)
        if waker is None:
            waker = _PUBLISHERS[settings] = waker_for(settings)
        return waker


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


def stop_tries(settings: Settings, done: Cancelled | Marked) -> None:
    """After the commit that ended them: stop the tries `done` took (`jobs.stopping`)."""
    if not done.attempts and not done.external_ids:
        return
    from sluice.scheduler.jobs import stopping  # Celery: only when there is a try to stop

    stopping.stop_tries(settings, done.attempts, done.external_ids)


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


def mark_tasks(
    session: Session,
    run: DagRun,
    dag: Dag,
    task_id: str,
    state: TaskInstanceState,
    *,
    upstream: bool,
    downstream: bool,
    who: str,
    now: dt.datetime,
) -> Marked:
    """Mark the TI `task_id` of `run` (with its upstream/downstream) `state`
    (`scheduling.marking`), one audit event per TI marked, in the caller's transaction.
    The caller commits, then calls `after_mark`. A git bundle's run is marked by its own
    version (`dag_of_run`), whatever `dag`'s."""
    dag = dag_of_run(session, run) or dag
    try:
        done = mark_task_instances(
            session, run, dag, [task_id], state, upstream=upstream, downstream=downstream, now=now
        )
    except UnknownTask as exc:
        raise UnknownTaskId(str(exc)) from None
    except AlreadyInState as exc:
        raise NothingToMark(str(exc)) from None
    for marked in done.task_ids:
        _record_mark(session, run, state, who=who, now=now, task_id=marked)
    return done


def _record_mark(
    session: Session,
    run: DagRun,
    state: str,
    *,
    who: str,
    now: dt.datetime,
    task_id: str | None = None,
    detail: str | None = None,
) -> None:
    """The audit event of a mark (`mark success` …) of the run or of its task `task_id`."""
    audit.record(
        session,
        who=who,
        action=f"mark {state}",
        dag_id=run.dag_id,
        run_id=run.run_id,
        task_id=task_id,
        now=now,
        detail=detail,
    )


def mark_a_run(
    session: Session, run: DagRun, state: DagRunState, *, who: str, now: dt.datetime
) -> Marked:
    """Mark `run` `state` with its TIs (`scheduling.marking.mark_run`), one audit event,
    in the caller's transaction. The caller commits, then calls `after_mark`."""
    try:
        done = mark_run(session, run, state, now=now)
    except AlreadyInState as exc:
        raise NothingToMark(str(exc)) from None
    detail = f"{len(done.task_ids)} task instances marked with it"
    _record_mark(session, run, state, who=who, now=now, detail=detail)
    return done


def after_mark(settings: Settings, run: DagRun, done: Marked) -> None:
    """After the mark's commit: wake the schedulers with the run's news so what the mark
    made ready is queued now, not at the next full pass (a run back in `queued` needs a
    pass that starts runs: a wake-up naming no run); then stop the tries it took (Celery's
    revoke costs more than the wake-up, and the tries' state is already written)."""
    wake_schedulers(settings, None if done.reopened else run.id)
    stop_tries(settings, done)
