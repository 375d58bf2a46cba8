"""DAG files that hang, flood or multiply: nothing wedges (real processes, PostgreSQL)."""

from __future__ import annotations

import signal
import textwrap
import time
from pathlib import Path

from sqlalchemy import create_engine, text

from tests.procs import Sluice, wait_until

HANGS_IN_WORKERS = """
import sys
import time
from sluice import DAG, task

if "worker" in sys.argv:  # the scheduler's parser imports it fine; a worker hangs in it
    time.sleep(3600)

with DAG("hangs", schedule=None) as dag:
    task(task_id="h")(lambda: 1)
"""

FINE = """
from sluice import DAG, task

with DAG("fine", schedule=None) as dag:
    task(task_id="f")(lambda: 1)
"""


def test_a_dag_file_that_hangs_in_a_worker_fails_its_tries_not_the_worker(
    sluice: Sluice,
) -> None:
    """Both slots of `sluice worker -c 2` take a try of a DAG whose import hangs: each try
    fails after SLUICE_PARSE_TIMEOUT with what happened, the other DAG's task then runs,
    and the worker stops on SIGTERM."""
    sluice.extra_env["SLUICE_PARSE_TIMEOUT"] = "2"
    (sluice.dags_folder / "hangs.py").write_text(textwrap.dedent(HANGS_IN_WORKERS))
    (sluice.dags_folder / "fine.py").write_text(textwrap.dedent(FINE))
    sluice.scheduler()
    worker = sluice.worker(concurrency=2)
    hung = [sluice.trigger("hangs") for _ in range(2)]
    # each slot took a try (on a slow machine the first may already have failed by its
    # parse timeout when the second starts)
    wait_until(
        lambda: all(
            sluice.db_task_states("hangs", r)["h"]["state"] in ("running", "failed") for r in hung
        )
    )
    fine = sluice.trigger("fine")
    assert sluice.wait_run("fine", fine, timeout=60) == "success"
    for run_id in hung:
        assert sluice.wait_run("hangs", run_id, timeout=30) == "failed"
        ti = sluice.db_task_states("hangs", run_id)["h"]
        assert ti["state"] == "failed"
        assert "importing the DAG file" in ti["error"] and "longer than 2s" in ti["error"]
    started = time.monotonic()
    worker.send_signal(signal.SIGTERM)
    worker.wait(timeout=20)
    assert time.monotonic() - started < 20


SLOW_TO_PARSE = """
import os
import time
from sluice import DAG, task

if os.environ.get("SLOW_PARSE"):  # set in the schedulers' environment only
    time.sleep(3)

with DAG("slow_{n}", schedule=None) as dag:
    task(task_id="s")(lambda: 1)
"""


def parsers() -> list[int]:
    """The pids of the DAG parser subprocesses running on this machine."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and b"sluice.tasks.parsing" in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_slow_files_neither_stop_scheduling_nor_kill_a_live_scheduler(sluice: Sluice) -> None:
    """Two schedulers parse three files that take 3 s each to import (9 s, past the 5 s
    heartbeat timeout): meanwhile another DAG's run goes through, and neither scheduler
    is marked dead; then the new DAGs are known."""
    (sluice.dags_folder / "fine.py").write_text(textwrap.dedent(FINE))
    sluice.run("dags", "list")  # known before the schedulers start
    sluice.extra_env["SLOW_PARSE"] = "1"
    sluice.scheduler()
    sluice.scheduler()
    del sluice.extra_env["SLOW_PARSE"]
    sluice.worker()
    for n in range(3):
        (sluice.dags_folder / f"slow_{n}.py").write_text(textwrap.dedent(SLOW_TO_PARSE.format(n=n)))
    wait_until(lambda: len(parsers()) >= 2)  # both schedulers are parsing the slow files
    run_id = sluice.trigger("fine")
    assert sluice.wait_run("fine", run_id, timeout=6) == "success"  # well before 9 s
    wait_until(lambda: "slow_2" in sluice.run("dags", "list"), timeout=40)
    engine = create_engine(sluice.database_url)
    try:
        with engine.connect() as conn:
            states = (
                conn.execute(text("SELECT state FROM job WHERE job_type = 'scheduler'"))
                .scalars()
                .all()
            )
    finally:
        engine.dispose()
    assert states == ["running", "running"]


def test_a_scheduler_marked_dead_while_alive_goes_on_as_a_new_job(pg_url: str) -> None:
    """Its heartbeat finds its job row no longer `running` (another scheduler gave up on
    it): it registers again instead of scheduling on under a dead job's id."""
    from sqlalchemy import update

    from sluice.broker.wakeup import LocalWaker
    from sluice.scheduler.core.db import make_engine, make_session_factory, transaction, utcnow
    from sluice.scheduler.core.models import Job
    from sluice.scheduler.core.settings import Settings
    from sluice.scheduler.jobs.scheduler_job import SchedulerJob

    engine = make_engine(pg_url)
    factory = make_session_factory(engine)
    try:
        job = SchedulerJob(Settings(database_url=pg_url), factory, lambda _: None, LocalWaker())
        first = job.register()
        with transaction(factory) as session:
            session.execute(update(Job).where(Job.id == first).values(state="failed"))
        job.heartbeat(utcnow(), force=True)
        with factory() as session:
            states: dict[int, str] = dict(session.execute(text("SELECT id, state FROM job")).all())
        assert job.job_id != first and states == {first: "failed", job.job_id: "running"}
    finally:
        engine.dispose()


CATCHING_UP = """
from datetime import datetime, timedelta, timezone
from sluice import DAG, task

with DAG("every_second", schedule=timedelta(seconds=1), catchup=True, max_active_runs=1,
         start_date=datetime(2026, 1, 1, tzinfo=timezone.utc)) as dag:
    task(task_id="t")(lambda: 1)
"""


def count_runs(sluice: Sluice) -> tuple[int, int]:
    """(runs of every_second, of them queued or running)."""
    engine = create_engine(sluice.database_url)
    try:
        with engine.connect() as conn:
            total, active = conn.execute(
                text(
                    "SELECT count(*), count(*) FILTER (WHERE state IN ('queued', 'running')) "
                    "FROM dag_run WHERE dag_id = 'every_second'"
                )
            ).one()
    finally:
        engine.dispose()
    return int(total), int(active)


def test_catch_up_creates_runs_as_they_finish_not_all_at_once(sluice: Sluice) -> None:
    """A one-second schedule with catch-up from January and max_active_runs=1 (a million
    intervals): the scheduler creates one run while it is unfinished, the next when it
    finished (it created 1,152 runs in 20 s)."""
    (sluice.dags_folder / "every_second.py").write_text(textwrap.dedent(CATCHING_UP))
    done = sluice.cli("scheduler", "--num-loops", "10", timeout=60)  # no worker: none ends
    assert done.returncode == 0, done.stderr
    assert count_runs(sluice) == (1, 1)
    sluice.scheduler()
    sluice.worker()
    wait_until(lambda: count_runs(sluice)[0] >= 3, timeout=30)
    assert count_runs(sluice)[1] <= 1
