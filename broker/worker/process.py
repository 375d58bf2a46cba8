"""Starting a Celery worker process for Sluice queues (`sluice worker -Q a,b -c N`).

Equivalent to `celery -A sluice.broker.worker.app worker -Q sluice.a,sluice.b -c N --without-mingle
--without-gossip` (and `-E` with `sluice worker -E`); mingle and gossip only slow the
start and add broker chatter, since workers share nothing but the database. Remote
control stays on: Flower and `celery inspect` list the workers and their queues.

The worker is built as Celery's own command builds it (`app.Worker(...)` with the
options converted as `celery worker` converts them) rather than by running that
command: `celery.bin` imports every Celery subcommand and the plugins installed
beside it (Flower, click-repl and prompt_toolkit), 0.3-0.5 s of CPU at each start
here. `WorkerOptions.argv` is the equivalent command line, and a test holds the
two together.
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
    """A Sluice worker's options: the Celery queues it consumes, its node name, pool,
    concurrency, log level and whether it sends task events (`-E`: the events Flower and
    `celery events` show; off by default, one broker message per event)."""

    queues: list[str]
    hostname: str
    concurrency: int
    pool: str = "prefork"
    loglevel: str = "INFO"
    task_events: bool = False

    @classmethod
    def of(
        cls,
        settings: Settings,
        queues: Sequence[str],
        concurrency: int,
        pool: str = "prefork",
        loglevel: str = "INFO",
        callbacks: bool = True,
        task_events: bool = False,
    ) -> WorkerOptions:
        """The options for Sluice queues `queues` (default: "default"), with the callback
        queue unless `callbacks` is False, named `sluice@<host>-<pid>`."""
        wanted = list(queues or [DEFAULT_QUEUE])
        if callbacks and settings.callback_queue not in wanted:
            wanted.append(settings.callback_queue)
        return cls(
            queues=[celery_queue(settings.namespace, q) for q in wanted],
            hostname=f"sluice@%h-{os.getpid()}",
            concurrency=concurrency,
            pool=pool,
            loglevel=loglevel,
            task_events=task_events,
        )

    def argv(self) -> list[str]:
        """The equivalent `celery worker` arguments."""
        return [
            "worker",
            "-Q",
            ",".join(self.queues),
            "-c",
            str(self.concurrency),
            "-P",
            self.pool,
            "-l",
            self.loglevel,
            "-n",
            self.hostname,
            "--without-mingle",
            "--without-gossip",
            *(["-E"] if self.task_events else []),
        ]

    def kwargs(self) -> dict[str, Any]:
        """The arguments of `app.Worker`, converted as `celery worker` converts `argv()`:
        the node name's `%h`, the pool's class, the level's number."""
        from celery import concurrency as pools
        from celery.utils.log import mlevel
        from celery.utils.nodenames import default_nodename, host_format

        return {
            "hostname": host_format(default_nodename(self.hostname)),
            "pool": pools.get_implementation(self.pool),
            "loglevel": mlevel(self.loglevel.upper()),
            "concurrency": self.concurrency,
            "queues": self.queues,
            "without_mingle": True,
            "without_gossip": True,
            "task_events": self.task_events,
            "optimization": "default",
        }


def start_worker(settings: Settings, options: WorkerOptions) -> int:
    """Run a worker in this process until it is stopped (SIGTERM: warm shutdown); the
    worker's exit code (0 after a warm shutdown)."""
    worker = create_worker_app(settings).Worker(**options.kwargs())
    worker.start()
    return int(worker.exitcode or 0)
