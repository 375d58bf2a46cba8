"""Starting a Celery worker process for Sluice queues (`sluice worker -Q a,b -c N`).

Equivalent to `celery -A sluice.broker.worker.app worker -Q sluice.a,sluice.b -c N --without-mingle
--without-gossip` (and `-E` with `sluice worker -E`); mingle and gossip only slow the
start and add broker chatter, since workers share nothing but the database. Remote
control stays on: Flower and `celery inspect` list the workers and their queues.
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
    task_events: bool = False,
) -> list[str]:
    """The `celery worker` arguments for Sluice queues `queues` (default: "default"),
    and the callback queue unless `callbacks` is False; `task_events` adds `-E` (the task
    events Flower and `celery events` show; off by default, one broker message per
    event)."""
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
        *(["-E"] if task_events else []),
    ]


def start_worker(
    settings: Settings,
    queues: list[str],
    concurrency: int,
    pool: str = "prefork",
    loglevel: str = "INFO",
    callbacks: bool = True,
    task_events: bool = False,
) -> None:
    """Run a worker in this process until it is stopped (SIGTERM: warm shutdown)."""
    app = create_worker_app(settings)
    argv = worker_argv(settings, queues, concurrency, pool, loglevel, callbacks, task_events)
    app.worker_main(argv)
