"""Starting a Celery worker process for Sluice queues (`sluice worker -Q a,b -c N`).

Equivalent to `celery -A sluice.broker.worker.app worker -Q sluice.a,sluice.b -c N --without-mingle
--without-gossip` (and `-E` with `sluice worker -E`); mingle and gossip only slow the
start and add broker chatter, since workers share nothing but the database. Remote
control stays on: Flower and `celery inspect` list the workers and their queues.

The worker is built as Celery's own command builds it (`app.Worker(...)` with the
options converted as `celery worker` converts them) rather than by running that
command: `celery.bin` imports every Celery subcommand and the plugins installed
beside it (Flower, click-repl and prompt_toolkit), 0.3-0.5 s of CPU at each start
here. `worker_argv` gives the equivalent command line, and a test holds the two
together.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sluice.broker.queues import DEFAULT_QUEUE, celery_queue
from sluice.broker.worker.app import create_worker_app
from sluice.scheduler.core.settings import Settings


@dataclass(frozen=True)
class WorkerOptions:
    """What a Sluice worker consumes and is called: its Celery queue names and node name."""

    queues: list[str]
    hostname: str


def worker_options(settings: Settings, queues: Sequence[str], callbacks: bool) -> WorkerOptions:
    """The Celery queues for Sluice queues `queues` (default: "default"), with the callback
    queue unless `callbacks` is False, and the node name `sluice@<host>-<pid>`."""
    wanted = list(queues or [DEFAULT_QUEUE])
    if callbacks and settings.callback_queue not in wanted:
        wanted.append(settings.callback_queue)
    names = [celery_queue(settings.namespace, q) for q in wanted]
    return WorkerOptions(queues=names, hostname=f"sluice@%h-{os.getpid()}")


def worker_argv(
    settings: Settings,
    queues: Sequence[str],
    concurrency: int,
    pool: str = "prefork",
    loglevel: str = "INFO",
    callbacks: bool = True,
    task_events: bool = False,
) -> list[str]:
    """The `celery worker` arguments equivalent to `start_worker`'s worker; `task_events`
    adds `-E` (the task events Flower and `celery events` show; off by default, one
    broker message per event)."""
    options = worker_options(settings, queues, callbacks)
    return [
        "worker",
        "-Q",
        ",".join(options.queues),
        "-c",
        str(concurrency),
        "-P",
        pool,
        "-l",
        loglevel,
        "-n",
        options.hostname,
        "--without-mingle",
        "--without-gossip",
        *(["-E"] if task_events else []),
    ]


def worker_kwargs(
    settings: Settings,
    queues: Sequence[str],
    concurrency: int,
    pool: str = "prefork",
    loglevel: str = "INFO",
    callbacks: bool = True,
    task_events: bool = False,
) -> dict[str, Any]:
    """The arguments of `app.Worker` for these options, converted as `celery worker`
    converts its command line (`worker_argv`): the node name's `%h`, the pool's class,
    the level's number."""
    from celery import concurrency as pools
    from celery.utils.log import mlevel
    from celery.utils.nodenames import default_nodename, host_format

    options = worker_options(settings, queues, callbacks)
    return {
        "hostname": host_format(default_nodename(options.hostname)),
        "pool": pools.get_implementation(pool),
        "loglevel": mlevel(loglevel.upper()),
        "concurrency": concurrency,
        "queues": options.queues,
        "without_mingle": True,
        "without_gossip": True,
        "task_events": task_events,
        "optimization": "default",
    }


def start_worker(
    settings: Settings,
    queues: list[str],
    concurrency: int,
    pool: str = "prefork",
    loglevel: str = "INFO",
    callbacks: bool = True,
    task_events: bool = False,
) -> int:
    """Run a worker in this process until it is stopped (SIGTERM: warm shutdown); the
    worker's exit code (0 after a warm shutdown)."""
    app = create_worker_app(settings)
    worker = app.Worker(
        **worker_kwargs(settings, queues, concurrency, pool, loglevel, callbacks, task_events)
    )
    worker.start()
    return int(worker.exitcode or 0)
