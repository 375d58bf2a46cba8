"""`sluice worker` builds its Celery worker as `celery worker` would from the same options.

The worker is made with `app.Worker(**options.kwargs())`, not by running Celery's
command (whose import of every subcommand and plugin costs a third of a second a start):
these tests parse `options.argv()` with Celery's own `worker` command and compare, and
ask a live `sluice worker` over Celery's remote control what it is.
"""

from __future__ import annotations

import os
import socket
from typing import Any

import pytest
from celery.bin.base import CLIContext
from celery.bin.worker import worker as celery_worker

from sluice.broker.app import create_app
from sluice.broker.worker.app import create_worker_app
from sluice.broker.worker.process import WorkerOptions
from sluice.scheduler.core.settings import Settings
from tests.conftest import close_celery_app
from tests.procs import Sluice, wait_until


@pytest.mark.parametrize(
    ("queues", "concurrency", "pool", "loglevel", "callbacks", "events"),
    [
        (["default"], 2, "prefork", "INFO", True, False),
        (["heavy", "io"], 8, "threads", "warning", False, True),
        (["default", "callbacks"], 1, "solo", "DEBUG", True, False),
    ],
)
def test_the_worker_is_the_one_celery_worker_makes_of_its_argv(
    queues: list[str], concurrency: int, pool: str, loglevel: str, callbacks: bool, events: bool
) -> None:
    settings = Settings(database_url="unused://", broker_url="redis://127.0.0.1:1/0")
    app = create_worker_app(settings)
    options = WorkerOptions.of(settings, queues, concurrency, pool, loglevel, callbacks, events)
    argv = options.argv()
    context = CLIContext(app=app, no_color=True, workdir=None, quiet=True)
    parsed = celery_worker.make_context("worker", argv[1:], obj=context).params

    ours = options.kwargs()
    for name, value in ours.items():
        theirs = parsed[name]
        if name == "concurrency":
            theirs = int(theirs)
        if name == "task_events":
            theirs = bool(theirs)
        assert theirs == value, (name, theirs, value)
    # and every other option the command line sets is the configuration's own value,
    # which the worker reads when not given it
    given = {k: v for k, v in parsed.items() if v is not None and v is not False}
    from_conf = {k: v for k, v in given.items() if k not in ours}
    assert from_conf == {
        "prefetch_multiplier": app.conf.worker_prefetch_multiplier,
        "schedule_filename": app.conf.beat_schedule_filename,  # beat's (-B), not run
    }
    assert ours["hostname"] == f"sluice@{socket.gethostname()}-{os.getpid()}"
    assert ours["queues"][-1] == ("sluice.callbacks" if callbacks else f"sluice.{queues[-1]}")


def _stats(app: Any) -> dict[str, Any] | None:
    inspect = app.control.inspect(timeout=1.0)
    stats, queues = inspect.stats(), inspect.active_queues()
    return {"stats": stats, "queues": queues} if stats and queues else None


def test_a_live_worker_has_its_name_pool_and_queues(sluice: Sluice) -> None:
    # Given `sluice worker -Q default,heavy -c 3 --pool threads`
    proc = sluice.start("worker", "worker", "-Q", "default,heavy", "-c", "3", "--pool", "threads")
    settings = Settings(
        database_url=sluice.database_url, broker_url=sluice.broker_url, namespace=sluice.namespace
    )
    app = create_app(settings)
    try:
        # When Celery's remote control asks it what it is
        def answered() -> dict[str, Any] | None:
            assert proc.poll() is None, sluice.logs()
            return _stats(app)

        found = wait_until(answered, timeout=30)
    finally:
        close_celery_app(app)
    # Then it is one node named after the process, with a pool of three threads
    [(name, stats)] = found["stats"].items()
    assert name == f"sluice@{socket.gethostname()}-{proc.pid}"
    assert stats["pool"]["max-concurrency"] == 3
    assert "thread" in stats["pool"]["implementation"]
    # consuming the Sluice queues it was given, and the callbacks'
    queues = {q["name"] for q in found["queues"][name]}
    ns = sluice.namespace
    assert queues == {f"{ns}.default", f"{ns}.heavy", f"{ns}.callbacks"}
    # and a warm shutdown ends it with exit code 0
    sluice.stop(proc)
    assert proc.returncode == 0, sluice.logs()
