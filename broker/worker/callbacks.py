"""The Celery task `sluice.run_callback`: run one due callback on a worker, once.

Claim (`queued` → `running` on the message's token, its own transaction), then, with no
transaction open, load the DAG file (the worker's DAG cache), find the callback the task
or the DAG sets for that kind, and run it with its context, within the callback timeout;
then record its end on the same token (`core.queries.callbacks`). A stale message (its
callback published again, or already run) claims nothing and runs nothing. A callback
that raises is retried with backoff by the schedulers' next publish.

Fenced like a try: while it runs, the process's heartbeat thread beats for it, so the
schedulers publish it again only when this worker is lost; a beat that finds it taken
back stops it (`runtime.Stop`). At `SLUICE_CALLBACK_TIMEOUT` a `TaskTimeout` (which its
`except Exception` cannot catch) ends it, and it is recorded `failed`, never run again;
one still running `SLUICE_TIMEOUT_GRACE` seconds later is recorded `failed` `(killed)` by
the deadlines thread and its pool process killed (`time_limits`). So a callback runs to
its end at most once, save when its worker dies while it runs.

The context: `dag_id`, `run_id`, `task_id` (None for a run's), `try_number`, `state`,
`kind`, `error`, `log_tail` (the try's last lines), `url` (the DAG's page in the UI),
`logical_date`.
"""

from __future__ import annotations

import functools
import logging
from typing import Any
from urllib.parse import quote

from sqlalchemy import select

from sluice.broker.worker.context import WorkerContext
from sluice.broker.worker.dag_files import local_file
from sluice.broker.worker.heartbeat import Heartbeat
from sluice.broker.worker.runner import error_line, sending_app
from sluice.broker.worker.secret_reads import use_worker_secrets
from sluice.broker.worker.time_limits import Ending, hard_limit
from sluice.scheduler.core.callback_kinds import ON_DEADLINE_MISSED
from sluice.scheduler.core.db import transaction, utcnow
from sluice.scheduler.core.messages import CallbackMessage
from sluice.scheduler.core.models import Dag, DagRun, DueCallback, TaskInstance
from sluice.scheduler.core.queries import callbacks as due
from sluice.scheduler.core.queries.task_logs import task_log_of
from sluice.tasks.callbacks import Callback, run_callback
from sluice.tasks.errors import TaskStopped, TaskTimeout
from sluice.tasks.runtime import Stop, call_with_timeout

log = logging.getLogger(__name__)

LOG_TAIL_LINES = 20

OPTION_OF_KIND = {
    "on_success": "on_success_callback",
    "on_failure": "on_failure_callback",
    "on_retry": "on_retry_callback",
    ON_DEADLINE_MISSED: "on_deadline_missed",
}


def run_callback_message(ctx: WorkerContext, msg: CallbackMessage) -> str:
    """Claim, run and record one callback; its new status, or "stale"."""
    with transaction(ctx.session_factory) as session:
        row = due.claim(session, msg, utcnow())
        if row is None:
            log.info("stale callback message %s (token %s): ignored", msg.callback_id, msg.token)
            return "stale"
        fileloc, context = _context(session, row, ctx.settings.base_url)
        session.expunge(row)
    what = f"{row.kind} of {row.dag_id}.{row.run_id}" + (f".{row.task_id}" if row.task_id else "")
    use_worker_secrets(ctx)  # a callback reads connections as a task does
    stop = Stop()
    beat = Heartbeat.for_callback(
        ctx.session_factory,
        ctx.settings.heartbeat_interval,
        msg.callback_id,
        msg.token,
        stop.stop,
        fence_after=ctx.settings.fence_after,
    )
    try:
        with beat:
            error, retry = _run(ctx, msg, row, fileloc, context, what, stop)
    except TaskStopped as exc:  # taken back, or recorded by its hard limit (`Expired`)
        log.warning("callback %s stopped: %s", what, exc)
        return "stale"
    status = _finish(ctx, msg, row, error, retry=retry)
    log.info("callback %s: %s", what, status or "taken back meanwhile (its worker thought lost)")
    return status or "stale"


def _run(
    ctx: WorkerContext,
    msg: CallbackMessage,
    row: DueCallback,
    fileloc: DagFile | None,
    context: dict[str, Any],
    what: str,
    stop: Stop,
) -> tuple[str | None, bool]:
    """Run the callback under its timeout and hard limit; its error (None: it ended
    well) and whether it may run again (not after its timeout). `TaskStopped` propagates."""
    try:
        target = _target(ctx, fileloc, row)
    except (Exception, TaskTimeout) as exc:  # the DAG file's import: may work next time
        return _raised(what, row, exc), True
    if target is None:
        log.info("%s: the DAG sets no such callback any more: nothing to run", what)
        return None, True
    timeout = ctx.settings.callback_timeout
    expire = functools.partial(_expire, ctx, msg, row, what, timeout)
    try:
        with hard_limit(timeout + ctx.settings.timeout_grace, expire, f"callback {what}"):
            call_with_timeout(
                lambda: run_callback(target, context, sending_app(ctx).send_task),
                timeout,
                f"callback {what} timed out after {timeout:g}s",
                stop,
            )
    except TaskTimeout as exc:
        return _raised(what, row, exc), False
    except Exception as exc:
        return _raised(what, row, exc), True
    return None, True


def _raised(what: str, row: DueCallback, exc: BaseException) -> str:
    error = error_line(exc)
    log.warning("callback %s raised (attempt %d): %s", what, row.attempts + 1, error)
    return error


def _expire(
    ctx: WorkerContext,
    msg: CallbackMessage,
    row: DueCallback,
    what: str,
    timeout: float,
    how: Ending,
) -> None:
    """Record a callback still running past its timeout and the grace (from the
    deadlines' thread, its code still running): `failed`, timed out, on its token."""
    error = error_line(TaskTimeout(f"callback {what} timed out after {timeout:g} s ({how.note})"))
    status = _finish(ctx, msg, row, error, retry=False)
    log.warning("callback %s: %s, %s", what, error, status or "taken back meanwhile")


def _finish(
    ctx: WorkerContext, msg: CallbackMessage, row: DueCallback, error: str | None, *, retry: bool
) -> str | None:
    """Record how this attempt of the callback ended, on its token (its own transaction);
    the new status, or None if the callback was taken back meanwhile."""
    with transaction(ctx.session_factory) as session:
        return due.finish(
            session,
            msg,
            utcnow(),
            error=error,
            attempts=row.attempts + 1,
            max_attempts=ctx.settings.callback_max_attempts,
            retry_delay=ctx.settings.callback_retry_delay,
            retry=retry,
        )


DagFile = tuple[str, "str | None"]
"""A DAG's `fileloc` and the commit of its run (`worker.dag_files.local_file`)."""


def _context(
    session: Any, row: DueCallback, base_url: str
) -> tuple[DagFile | None, dict[str, Any]]:
    """The DAG's file (and its run's commit) and the callback's context, read in the
    claim's transaction."""
    dag = session.get(Dag, row.dag_id)
    run = session.scalar(
        select(DagRun).where(DagRun.dag_id == row.dag_id, DagRun.run_id == row.run_id)
    )
    ti = session.get(TaskInstance, row.ti_id) if row.ti_id is not None else None
    tail = None
    if ti is not None:
        task_log = task_log_of(session, ti.id, row.try_number)
        if task_log is not None and task_log.content:
            tail = "\n".join(task_log.content.splitlines()[-LOG_TAIL_LINES:])
    error = ti.error if ti is not None else None
    if ti is None and run is not None and row.kind != ON_DEADLINE_MISSED:
        error = session.scalar(
            select(TaskInstance.error)
            .where(TaskInstance.dag_run_id == run.id, TaskInstance.error.is_not(None))
            .order_by(TaskInstance.end_date.desc())
            .limit(1)
        )
    context = {
        "dag_id": row.dag_id,
        "run_id": row.run_id,
        "task_id": row.task_id,
        "try_number": row.try_number if row.task_id else None,
        "state": row.state,
        "kind": row.kind,
        "error": error,
        "log_tail": tail,
        "url": f"{base_url}/dags/{quote(row.dag_id, safe='')}",
        "logical_date": run.logical_date.isoformat() if run is not None else None,
    }
    if dag is None:
        return None, context
    return (dag.fileloc, run.bundle_version if run is not None else None), context


def _target(ctx: WorkerContext, fileloc: DagFile | None, row: DueCallback) -> Callback | None:
    """The callback the DAG file sets now for `row`'s kind (None: it sets none); a git
    bundle's run's callbacks are its commit's."""
    if fileloc is None:
        raise LookupError(f"DAG '{row.dag_id}' is not in the database")
    dag = ctx.dags.get_dag(local_file(ctx.settings, *fileloc), row.dag_id)
    option = OPTION_OF_KIND[row.kind]
    if row.task_id is None:
        return dag.callbacks.get(option)
    task = dag.tasks.get(row.task_id)
    return None if task is None else task.callbacks.get(option)
