"""An in-process broker and worker for `sluice standalone` (no Redis, no worker process).

The broker is kombu's `memory://` transport, whose queues are shared by the whole
process; the worker is a Celery `WorkController` with the threads pool, run in a
daemon thread of this process, without mingle, gossip, heartbeat or remote control.
Tasks run through the same registered task and the same `run_task_instance` as on
a real worker. `start()` makes this app Celery's default app in the process: the
threads pool resolves task names through the default app. Publish with
`publisher.publish(embedded.app, ...)`.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import threading
import uuid
from collections.abc import Sequence
from typing import Any

from celery import Celery
from celery._state import _set_task_join_will_block
from sqlalchemy.orm import Session, sessionmaker

from sluice.broker.publisher import publish
from sluice.broker.queues import DEFAULT_QUEUE, celery_queue
from sluice.broker.wakeup import Waker, local_waker
from sluice.broker.worker.app import create_worker_app
from sluice.broker.worker.context import WorkerContext
from sluice.broker.worker.task import install_context
from sluice.scheduler.core.db import make_engine, make_session_factory
from sluice.scheduler.core.settings import Settings
from sluice.scheduler.core.tracing import tracing_configured
from sluice.tasks.loader import DagCache

log = logging.getLogger(__name__)

MEMORY_POLLING_INTERVAL = 0.002
"""Seconds the embedded worker sleeps when its memory queues are empty: a hop waits half
of it on average (a worker publishes the next task); idle, the whole embedded worker
costs about 2% of a core here, the polling a small part of it."""
READY_TIMEOUT = 10.0
THREAD_LINGER = 0.2


class EmbeddedBroker:
    """A memory:// Celery app plus a threads-pool worker running in this process.

    `waker` defaults to the process's LocalWaker for the namespace, the one
    `waker_for(settings)` gives the embedded scheduler; `session_factory` defaults
    to a new engine on `settings.database_url`.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        session_factory: sessionmaker[Session] | None = None,
        waker: Waker | None = None,
        broker_url: str = "memory://localhost/",
    ) -> None:
        self.settings = settings
        self.app: Celery = create_worker_app(settings, broker_url=broker_url)
        self.app.conf.update(
            broker_transport_options={"polling_interval": MEMORY_POLLING_INTERVAL},
            worker_enable_remote_control=False,
        )
        self.waker: Waker = waker or local_waker(settings.namespace)
        if session_factory is None:
            session_factory = make_session_factory(make_engine(settings.database_url))
        self._context = WorkerContext(
            session_factory=session_factory,
            dags=DagCache(timeout=settings.parse_timeout),
            waker=self.waker,
            settings=settings,
            hostname=socket.gethostname(),
            pid=os.getpid(),
            publish=functools.partial(publish, self.app),
            trace_tis=tracing_configured(),
        )
        self._worker: Any = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()

    def start(self, queues: Sequence[str] = (DEFAULT_QUEUE,), concurrency: int = 4) -> None:
        """Start the worker thread consuming Sluice `queues`; returns once it consumes."""
        if self._thread is not None:
            raise RuntimeError("the embedded worker is already started")
        install_context(self.app, self._context)
        # The threads pool looks tasks up in Celery's default app, not in the worker's.
        self.app.set_default()
        names = [celery_queue(self.settings.namespace, q) for q in queues]
        self._worker = self.app.WorkController(
            hostname=f"sluice-embedded-{os.getpid()}-{uuid.uuid4().hex[:8]}@{socket.gethostname()}",
            pool_cls="threads",
            concurrency=concurrency,
            queues=names,
            without_mingle=True,
            without_gossip=True,
            without_heartbeat=True,
            loglevel=logging.getLogger().getEffectiveLevel(),
            ready_callback=lambda _consumer: self._ready.set(),
        )
        self._thread = threading.Thread(
            target=self._worker.start, name="sluice-embedded-worker", daemon=True
        )
        self._thread.start()
        if not self._ready.wait(READY_TIMEOUT):
            raise RuntimeError("the embedded worker did not start in time")
        log.info("embedded worker consuming %s with %s threads", ",".join(names), concurrency)

    def stop(self) -> None:
        """Warm shutdown: returns once running tasks have finished.

        The consumer thread may still finish its last poll (up to 2 s, Celery's
        fixed drain timeout) in the background; its consumer is already cancelled,
        so it takes no more messages. Messages it had not acknowledged are restored
        to the (process-wide) memory queue.
        """
        if self._worker is None or self._thread is None:
            return
        self._worker.stop(in_sighandler=False)
        self._thread.join(THREAD_LINGER)
        # the worker set Celery's process-wide "a result.get() would block" guard; the
        # process outlives it (as Celery's own in-process test worker does, lift it)
        _set_task_join_will_block(False)
        self._worker = None
        self._thread = None
        self._ready.clear()

    def __enter__(self) -> EmbeddedBroker:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
