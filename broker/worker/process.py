"""Starting a Celery worker process for Sluice queues (`sluice worker -Q a,b -c N`).

Equivalent to `celery -A sluice.broker.worker.app worker -Q sluice.a,sluice.b -c N --without-mingle
--without-gossip`; mingle and gossip only slow the start and add broker chatter,
since workers share nothing but the database.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from sluice.broker.queues import DEFAULT_QUEUE, celery_queue
from sluice.broker.worker.app import create_worker_app
from sluice.scheduler.core.settings import Settings


def worker_argv(
    settings: Settings,
    queues: Sequence[str],
    concurrency: int,
    pool: str = "prefork",
    loglevel: str = "INFO",
    callbacks: bool = True,
) -> list[str]:
    """The `celery worker` arguments for Sluice queues `queues` (default: "default"),
    and the callback queue unless `callbacks` is False."""
    wanted = list(queues or [DEFAULT_QUEUE])
    if callbacks and settings.callback_queue not in wanted:
        wanted.append(settings.callback_queue)
    names = [celery_queue(settings.namespace, q) for q in wanted]
    return [
        "worker",
        "-Q",
        ",".join(names),
        "-c",
        str(concurrency),
        "-P",
        pool,
        "-l",
        loglevel,
        "-n",
        f"sluice@%h-{os.getpid()}",
        "--without-mingle",
        "--without-gossip",
    ]


def start_worker(
    settings: Settings,
    queues: list[str],
    concurrency: int,
    pool: str = "prefork",
    loglevel: str = "INFO",
    callbacks: bool = True,
) -> None:
    """Run a worker in this process until it is stopped (SIGTERM: warm shutdown)."""
    app = create_worker_app(settings)
    app.worker_main(worker_argv(settings, queues, concurrency, pool, loglevel, callbacks))
