"""A job whose loop dies of an exception is recorded `failed` with its error, never
`success` (issue 39, 4.1: junk in the broker's news set raised `ValueError` at `int(m)`
up to the scheduler's loop, which exited and recorded its job row `success`).

Real PostgreSQL; the jobs run in this process with a waker whose `take_news` raises, as
the Redis waker's did on a member that was not a run id.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection
from pathlib import Path

import pytest
from sqlalchemy import select

from sluice.broker.wakeup import LocalWaker
from sluice.scheduler.core.db import make_engine, make_session_factory
from sluice.scheduler.core.models import Job
from sluice.scheduler.core.settings import Settings
from sluice.scheduler.jobs.backfill_job import BackfillJob
from sluice.scheduler.jobs.base import DagRunJob
from sluice.scheduler.jobs.scheduler_job import SchedulerJob
from tests.integration.test_backfill_limits import write_hourly
from tests.procs import Sluice


class BrokenNews(LocalWaker):
    """A waker whose news cannot be read (what `int(b"notanint")` did)."""

    def take_news(self) -> set[int] | None:
        raise ValueError("invalid literal for int() with base 10: b'notanint'")

    def share(self, run_ids: Collection[int]) -> None:
        raise AssertionError("not reached")


def job_rows(database_url: str) -> list[tuple[str, str, str | None]]:
    engine = make_engine(database_url)
    try:
        with make_session_factory(engine)() as session:
            rows = session.execute(select(Job.job_type, Job.state, Job.error)).all()
    finally:
        engine.dispose()
    return [(job_type, str(state), error) for job_type, state, error in rows]


def run_until_it_raises(job: DagRunJob) -> None:
    with pytest.raises(ValueError, match="notanint"):
        job.run(num_loops=5)


def test_a_scheduler_whose_loop_raises_is_recorded_failed_with_its_error(
    pg_url: str, tmp_path: Path
) -> None:
    # Given a scheduler whose news cannot be read
    settings = Settings(database_url=pg_url, dags_folder=tmp_path, loop_interval=0.05)
    engine = make_engine(pg_url)
    try:
        job = SchedulerJob(settings, make_session_factory(engine), lambda _: None, BrokenNews())
        # When its loop runs: the exception propagates (the process exits non-zero)
        run_until_it_raises(job)
    finally:
        engine.dispose()
    # Then its job row is failed, with the error, not success
    assert job_rows(pg_url) == [
        ("scheduler", "failed", "ValueError: invalid literal for int() with base 10: b'notanint'")
    ]


def test_a_backfill_whose_loop_raises_is_recorded_failed_with_its_error(
    sluice: Sluice, tmp_path: Path
) -> None:
    write_hourly(sluice, tmp_path)
    engine = make_engine(sluice.database_url)
    try:
        start = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
        job = BackfillJob(
            Settings(database_url=sluice.database_url, loop_interval=0.05),
            make_session_factory(engine),
            lambda _: None,
            BrokenNews(),
            dag_id="hourly",
            dates=[start + dt.timedelta(hours=h) for h in range(2)],
        )
        job.prepare()
        run_until_it_raises(job)
    finally:
        engine.dispose()
    [(job_type, state, error)] = job_rows(sluice.database_url)
    assert (job_type, state) == ("backfill", "failed")
    assert error is not None and error.startswith("ValueError: invalid literal")


def test_a_scheduler_stopped_after_its_loops_is_recorded_success(
    pg_url: str, tmp_path: Path
) -> None:
    """The other side: a loop that ends without an exception is `success`, no error."""
    settings = Settings(database_url=pg_url, dags_folder=tmp_path, loop_interval=0.05)
    engine = make_engine(pg_url)
    try:
        SchedulerJob(settings, make_session_factory(engine), lambda _: None, LocalWaker()).run(
            num_loops=2
        )
    finally:
        engine.dispose()
    assert job_rows(pg_url) == [("scheduler", "success", None)]
