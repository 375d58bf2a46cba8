"""The Celery tasks `sluice.run_task_instance` (ids in, one `run_task_instance` call) and
`sluice.run_callback` (one due callback, `broker.worker.callbacks`).

Invariants: the `WorkerContext` (engine, DAG cache, waker) belongs to one process.
It is keyed by `os.getpid()` and built in the process that runs tasks: at
`worker_process_init` in a prefork child (so the first task does not pay for it),
else on first use. A child never uses an engine or socket inherited from its
parent. Importing this module reads no configuration and opens no connection.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import socket
import threading
import time
from typing import Any

from celery import Celery, Task, current_app
from celery.exceptions import Reject
from celery.signals import worker_init, worker_process_init

from sluice.broker.app import settings_of
from sluice.broker.kombu_fixes import guard_closed_redis_transport
from sluice.broker.publisher import publish
from sluice.broker.queues import CALLBACK_TASK_NAME, RUN_TASK_NAME
from sluice.broker.trace_headers import incoming_carrier
from sluice.broker.wakeup import waker_for
from sluice.broker.worker.callbacks import run_callback_message
from sluice.broker.worker.context import WorkerContext
from sluice.broker.worker.runner import Outcome, run_task_instance
from sluice.broker.worker.task_env import hide_secrets
from sluice.broker.worker.time_limits import mark_pool_child
from sluice.broker.worker.tracing import annotate
from sluice.scheduler.core.db import make_engine, make_session_factory
from sluice.scheduler.core.deployment import HEADER as DEPLOYMENT_HEADER
from sluice.scheduler.core.deployment import deployment_id
from sluice.scheduler.core.messages import CallbackMessage, RunMessage
from sluice.scheduler.core.settings import Settings
from sluice.scheduler.core.tracing import tracing_configured
from sluice.tasks.loader import DagCache

log = logging.getLogger(__name__)

_CONTEXT_ATTR = "sluice_worker_context"
_lock = threading.Lock()


def register(app: Celery) -> None:
    """Register the worker task on `app` (called by `sluice.broker.worker.app.create_worker_app` and
    `sluice.attach`), and guard kombu's Redis channel against a crash on broker loss."""
    guard_closed_redis_transport()

    @app.task(
        name=RUN_TASK_NAME,
        bind=True,
        acks_late=True,
        ignore_result=True,
        shared=False,
        throws=(TryFailed,),
    )
    def run_task_instance_task(self: Task, **kwargs: Any) -> str:
        msg = RunMessage.from_kwargs(kwargs)
        context = context_for(self.app)
        refuse_a_strangers(context, msg, getattr(self.request, DEPLOYMENT_HEADER, None))
        if context.trace_tis:  # the TI's span, for what the task sends on (a CeleryTask)
            msg = dataclasses.replace(msg, trace=incoming_carrier(self.request))
        annotate(msg, hostname=context.hostname)
        outcome = run_task_instance(context, msg)
        annotate(msg, state=outcome.value)
        if outcome in FAILED_OUTCOMES:
            raise TryFailed(f"{msg.dag_id}.{msg.task_id} try {msg.try_number}: {outcome.value}")
        return outcome.value

    @app.task(name=CALLBACK_TASK_NAME, bind=True, acks_late=True, ignore_result=True, shared=False)
    def run_callback_task(self: Task, **kwargs: Any) -> str:
        msg = CallbackMessage.from_kwargs(kwargs)
        context = context_for(self.app)
        theirs = getattr(self.request, DEPLOYMENT_HEADER, None)
        if theirs and context.deployment and theirs != context.deployment:
            time.sleep(STRANGER_DELAY)  # another deployment's: back to the queue, for its own
            raise Reject(f"callback message of deployment {theirs}", requeue=True)
        return run_callback_message(context, msg)


class TryFailed(Exception):
    """A try that failed, its failure already written (the TI `failed` or `up_for_retry`):
    raised after the result's commit so that Celery reports the message's task as failed
    (its `task-failed` event: FAILURE in Flower), as Airflow's Celery executor does.
    Declared in the task's `throws`: Celery logs it in one line, without a traceback;
    the message is acknowledged as after a success (late acks ack failures too), and
    nothing is retried by Celery (the schedulers and workers retry, from the database)."""


FAILED_OUTCOMES = frozenset({Outcome.FAILED, Outcome.UP_FOR_RETRY})


STRANGER_DELAY = 1.0
"""Seconds a worker waits before putting back a message of another deployment (so that
the deployment's own workers, not this one again at once, take it)."""


def refuse_a_strangers(context: WorkerContext, msg: RunMessage, theirs: str | None) -> None:
    """A message published by another deployment (another database) on this broker and
    namespace goes back to the queue, with one ERROR line: acknowledged as stale, it
    would be lost to its own workers until their queued sweep."""
    if not theirs or not context.deployment or theirs == context.deployment:
        return
    log.error(
        "a message for %s.%s comes from deployment %s, and this worker serves deployment %s "
        "(another database): two deployments share the broker and the namespace %r; give "
        "each its own SLUICE_NAMESPACE or Redis db. The message goes back to the queue.",
        msg.dag_id,
        msg.task_id,
        theirs,
        context.deployment,
        context.settings.namespace,
    )
    time.sleep(STRANGER_DELAY)
    raise Reject(f"message of deployment {theirs}", requeue=True)


def install_context(app: Celery, context: WorkerContext) -> None:
    """Use `context` for the tasks this process runs from `app` (the embedded worker)."""
    setattr(app, _CONTEXT_ATTR, (os.getpid(), context))


def context_for(app: Celery) -> WorkerContext:
    """This process's `WorkerContext` for `app`, built on first use after a fork."""
    pid = os.getpid()
    with _lock:
        held = getattr(app, _CONTEXT_ATTR, None)
        if held is not None and held[0] == pid:
            context: WorkerContext = held[1]
            return context
        context = _build_context(app, pid)
        setattr(app, _CONTEXT_ATTR, (pid, context))
        return context


def _build_context(app: Celery, pid: int) -> WorkerContext:
    """A context whose downstream messages go out through `app` (the worker's own)."""
    settings = settings_of(app)
    engine = make_engine(
        settings.database_url,
        idle_in_transaction_timeout=settings.db_idle_in_tx_timeout,
    )
    factory = make_session_factory(engine)
    deployment = deployment_id(factory)
    app.conf[DEPLOYMENT_HEADER] = deployment  # what this worker publishes carries it too
    log.info("worker process %s ready (database %s)", pid, engine.url.render_as_string())
    return WorkerContext(
        session_factory=factory,
        dags=DagCache(timeout=settings.parse_timeout),
        waker=waker_for(settings),
        settings=settings,
        hostname=socket.gethostname(),
        pid=pid,
        publish=functools.partial(publish, app),
        trace_tis=tracing_configured(),
        deployment=deployment,
    )


@worker_init.connect
def _on_worker_init(sender: Any = None, **_: Any) -> None:
    """Worker start (its main process, whose threads run the tasks of a threads or solo
    pool), before any pool child is forked: the deployment's secrets leave the
    environment (`task_env.hide_secrets`), and cffi's C parser is built (`_declare_prctl`)."""
    settings = getattr(getattr(sender, "app", None), "conf", {}).get("sluice_settings")
    if isinstance(settings, Settings):
        hide_secrets(settings)
    _declare_prctl()


def _declare_prctl() -> None:
    """Each prefork child sets its parent-death signal (Celery, through billiard), which,
    where cffi is installed (cryptography needs it), declares `prctl` with cffi: cffi
    builds its C parser (pycparser) once in a process, 60 to 150 ms of CPU in every child
    a pool starts. Declared once here, in the parent, the children inherit the parser."""
    try:
        import cffi
    except ImportError:
        return
    cffi.FFI().cdef("int prctl (int __option, ...);")


@worker_process_init.connect
def _on_worker_process_init(**_: Any) -> None:
    """Prefork child start: an overdue try or callback ends this process (the pool starts
    another, `time_limits`); hide the secrets from its tasks (`task_env`), and build its
    context now (the app is the child's current app)."""
    mark_pool_child()
    app = current_app._get_current_object()
    settings = app.conf.get("sluice_settings")
    if not isinstance(settings, Settings):
        return
    hide_secrets(settings)
    try:
        context_for(app)
    except Exception as exc:  # the first task builds it again, and reports the error
        log.warning("worker context not built at process start: %s", exc)
