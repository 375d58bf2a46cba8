"""A scheduler hears the wake-ups sent while it makes its first pass.

It used to subscribe at its first wait, after that pass: a run triggered while a
scheduler started (its pass already past the runs, the wake-up sent before the
subscription) waited a whole loop interval. Real PostgreSQL and Redis; the job runs
in a thread with a 30 s loop interval, so only a wake-up heard makes its second pass
come at once.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
import uuid
from pathlib import Path

import pytest

from sluice.broker.pg_wakeup import PgWaker
from sluice.broker.wakeup import RedisWaker, Waker
from sluice.scheduler.core.db import make_engine, make_session_factory
from sluice.scheduler.core.messages import RunMessage
from sluice.scheduler.core.settings import Settings
from sluice.scheduler.jobs.base import TickResult
from sluice.scheduler.jobs.scheduler_job import SchedulerJob


def test_a_wake_up_sent_during_the_first_pass_brings_the_second_at_once(
    pg_url: str, redis_url: str, tmp_path: Path
) -> None:
    # Given a scheduler with a 30 s loop, and a trigger that wakes it during its first pass
    namespace = f"t{uuid.uuid4().hex[:8]}"
    folder = tmp_path / "dags"
    folder.mkdir()
    settings = Settings(
        database_url=pg_url,
        broker_url=redis_url,
        dags_folder=folder,
        namespace=namespace,
        loop_interval=30.0,
    )
    engine = make_engine(pg_url)
    sent: list[RunMessage] = []
    job = SchedulerJob(
        settings, make_session_factory(engine), sent.extend, RedisWaker(redis_url, namespace)
    )
    trigger = RedisWaker(redis_url, namespace)
    passes: list[float] = []
    first_pass = job.tick

    def tick(now: dt.datetime) -> TickResult:
        result = first_pass(now)
        passes.append(time.monotonic())
        if len(passes) == 1:
            trigger.wake()  # as `sluice dags trigger` committing during the pass
        else:
            job.stopping = True  # two passes are all this test needs
        return result

    job.tick = tick  # type: ignore[method-assign]

    # When the scheduler runs
    runner = threading.Thread(target=job.run, daemon=True)
    runner.start()
    runner.join(timeout=10)
    try:
        # Then the wake-up brought its second pass at once, not after the loop interval
        assert not runner.is_alive(), "the second pass waited for the 30 s loop interval"
        assert len(passes) == 2 and passes[1] - passes[0] < 5
    finally:
        job.stopping = True
        runner.join(timeout=35)
        trigger.close()
        engine.dispose()


@pytest.mark.parametrize("kind", ["redis", "postgresql"])
def test_a_waker_that_listened_hears_a_wake_up_sent_before_its_first_wait(
    kind: str, pg_url: str, redis_url: str
) -> None:
    namespace = f"t{uuid.uuid4().hex[:8]}"

    def waker() -> Waker:
        if kind == "redis":
            return RedisWaker(redis_url, namespace)
        return PgWaker(pg_url, namespace)

    waiter, sender = waker(), waker()
    try:
        waiter.listen()
        assert waiter.take_news() is None  # a first pass looks at everything
        sender.wake(7)  # sent before the first wait
        assert waiter.wait(5.0) is True
        assert waiter.take_news() == {7}
    finally:
        waiter.close()
        sender.close()
