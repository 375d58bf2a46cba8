"""Huge and stopped backfills: batches with heartbeats, a question before thousands of
runs, runs left claimed by a dead job released, and `sluice backfill cancel`."""

from __future__ import annotations

import datetime as dt
import textwrap
import threading
from pathlib import Path

from sqlalchemy import select, text

from sluice.broker.wakeup import LocalWaker
from sluice.scheduler.core.db import make_engine, make_session_factory
from sluice.scheduler.core.models import DagRun, Job
from sluice.scheduler.core.settings import Settings
from sluice.scheduler.jobs.backfill_job import RUNS_PER_BATCH, BackfillJob
from tests.integration.test_backfill import rows
from tests.procs import Sluice, wait_until

HOURLY = """
import time
from datetime import datetime, timezone
from pathlib import Path
from sluice import DAG, task

with DAG("hourly", schedule="@hourly", start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
         catchup=False, max_active_runs=2) as dag:
    @task
    def work(context):
        time.sleep({sleep} if context["run_id"].startswith("backfill") else 0)
        Path({marker!r}, context["run_id"].replace(":", "_")).write_text("finished")
"""


def write_hourly(sluice: Sluice, tmp_path: Path, sleep: float = 0) -> Path:
    marker = tmp_path / "finished"
    marker.mkdir()
    (sluice.dags_folder / "hourly.py").write_text(
        textwrap.dedent(HOURLY.format(sleep=sleep, marker=str(marker)))
    )
    sluice.run("dags", "list")
    return marker


def finished_backfills(marker: Path) -> list[str]:
    return sorted(p.name for p in marker.iterdir() if p.name.startswith("backfill"))


def test_runs_are_created_in_batches_between_heartbeats(sluice: Sluice, tmp_path: Path) -> None:
    """A backfill of three batches of runs: each batch is committed on its own (the runs
    appear as they are made) and the job's heartbeat moves between them."""
    write_hourly(sluice, tmp_path)
    engine = make_engine(sluice.database_url)
    factory = make_session_factory(engine)
    start = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    dates = [start + dt.timedelta(hours=h) for h in range(RUNS_PER_BATCH * 2 + 10)]
    job = BackfillJob(
        Settings(database_url=sluice.database_url),
        factory,
        lambda _: None,
        LocalWaker(),
        dag_id="hourly",
        dates=dates,
    )
    seen: list[tuple[int, dt.datetime]] = []
    preparing = threading.Thread(target=job.prepare)
    try:
        preparing.start()
        while preparing.is_alive():
            with factory() as session:
                runs = len(session.scalars(select(DagRun.id)).all())
                beat = session.scalar(select(Job.latest_heartbeat))
            if beat is not None and (not seen or seen[-1] != (runs, beat)):
                seen.append((runs, beat))
        preparing.join()
    finally:
        engine.dispose()
    assert len(job.run_pks) == len(dates)
    partial = [(runs, beat) for runs, beat in seen if 0 < runs < len(dates)]
    assert partial, f"no batch was visible before the last: {seen}"  # committed one by one
    assert len({beat for _, beat in seen}) >= 3  # a heartbeat after each batch


def test_thousands_of_runs_are_asked_for(sluice: Sluice, tmp_path: Path) -> None:
    """Over 1,000 runs without --yes (no terminal to ask at): one line, exit 2, nothing
    written; with --yes they are made."""
    marker = write_hourly(sluice, tmp_path)
    args = ["backfill", "hourly", "--start", "2026-01-01", "--end", "2026-03-01"]
    refused = sluice.cli(*args)
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        "sluice: error: a backfill of 1,417 runs of 'hourly' (over "
        "SLUICE_BACKFILL_CONFIRM_RUNS=1000): pass --yes to create them"
    ]
    assert rows(sluice.database_url, "SELECT count(*) FROM dag_run") == [(0,)]
    # the threshold is a setting: three runs over a threshold of 2 are asked for too
    sluice.extra_env["SLUICE_BACKFILL_CONFIRM_RUNS"] = "2"
    few = ["backfill", "hourly", "--start", "2026-01-01T00:00", "--end", "2026-01-01T02:00"]
    assert sluice.cli(*few).returncode == 2
    assert rows(sluice.database_url, "SELECT count(*) FROM dag_run") == [(0,)]
    # with --yes they are made, and run
    done = sluice.cli(*few, "--yes", "--local")
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(finished_backfills(marker)) == 3


def test_runs_left_claimed_by_a_job_that_is_not_running_are_released(
    sluice: Sluice, tmp_path: Path
) -> None:
    """A backfill killed after a scheduler marked it dead left its runs claimed: the
    schedulers release them and finish them."""
    marker = write_hourly(sluice, tmp_path)
    engine = make_engine(sluice.database_url)
    try:
        start = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
        job = BackfillJob(
            Settings(database_url=sluice.database_url),
            make_session_factory(engine),
            lambda _: None,
            LocalWaker(),
            dag_id="hourly",
            dates=[start + dt.timedelta(hours=h) for h in range(3)],
        )
        job.prepare()  # its runs, claimed by its job
        with engine.begin() as conn:  # then found dead, its runs still claimed
            conn.execute(text("UPDATE job SET state = 'failed'"))
    finally:
        engine.dispose()
    sluice.scheduler()
    sluice.worker()
    wait_until(lambda: len(finished_backfills(marker)) == 3, timeout=60)
    assert rows(
        sluice.database_url, "SELECT count(*) FROM dag_run WHERE claimed_by_job_id IS NOT NULL"
    ) == [(0,)]


def test_cancel_ends_a_backfill_and_stops_its_running_tries(sluice: Sluice, tmp_path: Path) -> None:
    """`sluice backfill cancel hourly` while its tries run: the runs end failed, the running
    tries fail as cancelled and their code is stopped (it never finishes), the backfill
    process exits, and the DAG runs again afterwards."""
    marker = write_hourly(sluice, tmp_path, sleep=30)
    sluice.scheduler()
    sluice.worker(concurrency=2)
    backfill = sluice.start(
        "backfill", "backfill", "hourly", "--start", "2026-01-01", "--end", "2026-01-01T03:00"
    )
    running = "SELECT count(*) FROM task_instance WHERE state = 'running'"
    wait_until(lambda: rows(sluice.database_url, running) == [(2,)], timeout=30)
    out = sluice.ok("backfill", "cancel", "hourly")
    assert out.strip() == "cancelled 4 backfill run(s) of hourly; 2 tries stopped"
    assert backfill.wait(timeout=30) == 1  # not every run succeeded
    backfill_tis = (
        "SELECT state, error FROM task_instance WHERE run_id LIKE 'backfill%' ORDER BY id"
    )
    states = rows(sluice.database_url, backfill_tis)
    assert sorted(states) == [("failed", "cancelled")] * 2 + [("skipped", None)] * 2
    backfill_runs = "SELECT DISTINCT state FROM dag_run WHERE run_type = 'backfill'"
    assert rows(sluice.database_url, backfill_runs) == [("failed",)]
    run_id = sluice.trigger("hourly")  # the worker is still there; this one runs to the end
    assert sluice.wait_run("hourly", run_id, timeout=60) == "success"
    assert (marker / run_id.replace(":", "_")).exists()
    assert finished_backfills(marker) == []  # the stopped tries never got to their end
