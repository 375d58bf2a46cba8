"""Several schedulers, backfills beside them, and faults: nothing lost, stuck or run twice.

Every task appends one line per execution to a file (O_APPEND), so "exactly
once" is checked from real executions, not from the database.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from sqlalchemy import text

from tests.engines import engine_for
from tests.procs import Sluice, wait_until

FANOUT = """
import os, time
from datetime import datetime, timedelta, timezone
from sluice import DAG, task

LOG = {log!r}

def record(context):
    line = f"{{context['run_id']}} {{context['task_id']}} {{context['try_number']}}\\n"
    fd = os.open(LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(fd, line.encode())
    os.close(fd)

with DAG({dag_id!r}, schedule={schedule!r}, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
         catchup=False, max_active_runs=16, max_active_tasks=64) as dag:
    @task(retries={retries}, retry_delay=timedelta(milliseconds=200))
    def start(context):
        record(context)
        time.sleep({sleep})

    @task(trigger_rule="all_done")
    def join(context):
        record(context)

    for i in range({width}):
        @task(task_id=f"t{{i}}", pool={pool!r}, retries={retries},
              retry_delay=timedelta(milliseconds=200))
        def mid(context):
            record(context)
            time.sleep({sleep})
        start >> mid >> join
"""


def write_fanout(
    sluice: Sluice,
    log: Path,
    *,
    dag_id: str = "fan",
    width: int = 15,
    sleep: float = 0.0,
    schedule: str | None = None,
    pool: str | None = None,
    retries: int = 0,
) -> None:
    (sluice.dags_folder / f"{dag_id}.py").write_text(
        textwrap.dedent(
            FANOUT.format(
                log=str(log),
                dag_id=dag_id,
                width=width,
                sleep=sleep,
                schedule=schedule,
                pool=pool,
                retries=retries,
            )
        )
    )


def executions(log: Path) -> collections.Counter[tuple[str, str]]:
    lines = log.read_text().splitlines() if log.exists() else []
    return collections.Counter((ln.split()[0], ln.split()[1]) for ln in lines)


def query(sluice: Sluice, sql: str, **params: object) -> list[tuple]:
    with engine_for(sluice.database_url).connect() as conn:  # pooled: polled
        return [tuple(r) for r in conn.execute(text(sql), params).all()]


def trigger_many(sluice: Sluice, dag_id: str, n: int, every: float = 0.5) -> list[str]:
    """`n` runs triggered one after another, `every` seconds apart, as users and their
    scripts trigger: the runs arrive over seconds while the schedulers pass, which is
    what lets two schedulers share them (made all at once, the first scheduler's pass
    would take them all). `Sluice.trigger` runs the command in this process: a `sluice`
    process a run cost 1.5 s of CPU, and its start was the pause."""
    runs = []
    for i in range(n):
        if i:
            time.sleep(every)
        runs.append(sluice.trigger(dag_id, "--run-id", f"r{i:02d}"))
    return runs


def assert_all_once(log: Path, run_ids: list[str], task_ids: list[str]) -> None:
    counts = executions(log)
    expected = {(r, t) for r in run_ids for t in task_ids}
    assert set(counts) >= expected, f"missing executions: {sorted(expected - set(counts))[:5]}"
    twice = {k: n for k, n in counts.items() if k in expected and n != 1}
    assert not twice, f"executed more than once: {twice}"


FAN_TASKS = ["start", "join", *[f"t{i}" for i in range(15)]]


@pytest.mark.long
def test_two_schedulers_two_workers_each_task_once(sluice: Sluice, tmp_path: Path) -> None:
    log = tmp_path / "exec.log"
    write_fanout(sluice, log)
    sluice.run("dags", "list")
    sluice.scheduler()
    sluice.scheduler()
    sluice.worker(concurrency=2)
    sluice.worker(concurrency=2)
    runs = trigger_many(sluice, "fan", 12)

    for run_id in runs:
        assert sluice.wait_run("fan", run_id, timeout=120) == "success"
    assert_all_once(log, runs, FAN_TASKS)
    # NULL: queued by a worker after an upstream finished (scheduler.decide.downstream)
    queued_by = query(
        sluice,
        "SELECT DISTINCT queued_by_job_id FROM task_instance WHERE queued_by_job_id IS NOT NULL",
    )
    assert len(queued_by) == 2, f"only one scheduler queued work: {queued_by}"


@pytest.mark.long
def test_sigkill_one_scheduler_mid_workload(sluice: Sluice, tmp_path: Path) -> None:
    log = tmp_path / "exec.log"
    write_fanout(sluice, log, sleep=0.05)
    sluice.run("dags", "list")
    doomed = sluice.scheduler()
    sluice.worker(concurrency=4)
    runs = trigger_many(sluice, "fan", 12)
    wait_until(lambda: sum(executions(log).values()) >= 20, timeout=60)
    survivor = sluice.scheduler()
    doomed.send_signal(signal.SIGKILL)
    doomed.wait()

    for run_id in runs:
        assert sluice.wait_run("fan", run_id, timeout=120) == "success"
    assert_all_once(log, runs, FAN_TASKS)
    assert survivor.poll() is None


def test_sigkill_worker_mid_task_is_retried_elsewhere(sluice: Sluice, tmp_path: Path) -> None:
    worker_killed_mid_task(sluice, tmp_path)


def worker_killed_mid_task(sluice: Sluice, tmp_path: Path) -> None:
    """A worker SIGKILLed with its pool child while a try runs: the task is retried on
    another worker and runs exactly twice (the killed try, the retry)."""
    log = tmp_path / "exec.log"
    (sluice.dags_folder / "victim.py").write_text(
        textwrap.dedent(f"""
    import os, time
    from datetime import timedelta
    from sluice import DAG, task

    with DAG("victim", schedule=None) as dag:
        @task(retries=1, retry_delay=timedelta(milliseconds=100))
        def long(context):
            fd = os.open({str(log)!r}, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            os.write(fd, f"{{context['run_id']}} long {{os.getpid()}}\\n".encode())
            os.close(fd)
            if context["try_number"] == 1:
                time.sleep(120)
    """)
    )
    sluice.run("dags", "list")
    sluice.scheduler()
    first = sluice.worker(concurrency=1)
    run_id = sluice.trigger("victim")
    wait_until(lambda: executions(log), timeout=30)
    second = sluice.worker(concurrency=1)
    os.killpg(first.pid, signal.SIGKILL)  # the worker and its pool child: no goodbye
    first.wait()

    assert sluice.wait_run("victim", run_id, timeout=60) == "success"
    ti = sluice.task_states("victim", run_id)["long"]
    assert ti["try_number"] == 2 and ti["state"] == "success"
    assert executions(log)[(run_id, "long")] == 2
    assert second.poll() is None


def test_broker_losing_messages_loses_no_task(sluice: Sluice, tmp_path: Path) -> None:
    def flush() -> None:
        client = redis.Redis.from_url(sluice.broker_url)
        wait_until(client.dbsize, timeout=10)  # published (just after their commit)
        client.flushdb()  # the queued messages are gone
        client.close()

    broker_losing_messages(sluice, tmp_path, flush)


def broker_losing_messages(sluice: Sluice, tmp_path: Path, lose: Callable[[], None]) -> None:
    """Three runs' first tasks queued, then `lose` drops every message from the broker
    before a worker starts: each task of each run runs once all the same."""
    sluice.extra_env["SLUICE_QUEUED_TIMEOUT"] = "2"
    log = tmp_path / "exec.log"
    write_fanout(sluice, log, width=5)
    sluice.run("dags", "list")
    sluice.scheduler()
    runs = trigger_many(sluice, "fan", 3)
    wait_until(
        lambda: len(query(sluice, "SELECT 1 FROM task_instance WHERE state = 'queued'")) == 3,
        timeout=30,
    )
    lose()
    sluice.worker(concurrency=2)

    for run_id in runs:
        assert sluice.wait_run("fan", run_id, timeout=60) == "success"
    assert_all_once(log, runs, ["start", "join", *[f"t{i}" for i in range(5)]])


def test_backfill_beside_two_schedulers(sluice: Sluice, tmp_path: Path) -> None:
    log = tmp_path / "exec.log"
    write_fanout(sluice, log, width=3, schedule="@daily")
    sluice.run("dags", "list")
    sluice.scheduler()
    sluice.scheduler()
    sluice.worker(concurrency=4)
    done = sluice.cli(
        "backfill", "fan", "--start", "2026-02-01", "--end", "2026-02-05", timeout=120
    )
    assert done.returncode == 0, done.stderr + sluice.logs()
    runs = query(sluice, "SELECT run_id, state FROM dag_run WHERE run_type = 'backfill'")
    assert len(runs) == 5 and {s for _, s in runs} == {"success"}
    assert_all_once(log, [r for r, _ in runs], ["start", "join", "t0", "t1", "t2"])
    # the same dates again are skipped, and nothing runs twice
    again = sluice.cli("backfill", "fan", "--start", "2026-02-01", "--end", "2026-02-05")
    assert again.returncode == 0 and again.stdout.count("skipped") == 5
    assert_all_once(log, [r for r, _ in runs], ["start", "join", "t0", "t1", "t2"])


def test_killed_backfill_is_adopted_by_schedulers(sluice: Sluice, tmp_path: Path) -> None:
    log = tmp_path / "exec.log"
    write_fanout(sluice, log, width=2, sleep=0.3, schedule="@daily")
    sluice.run("dags", "list")
    sluice.ok("dags", "pause", "fan")  # only backfill runs in this test
    sluice.worker(concurrency=4)
    backfill = sluice.start(
        "backfill",
        "backfill",
        "fan",
        "--start",
        "2026-03-01",
        "--end",
        "2026-03-05",
        "--max-active-runs",
        "1",
    )
    wait_until(lambda: sum(executions(log).values()) >= 3, timeout=60)
    backfill.send_signal(signal.SIGKILL)
    backfill.wait()
    runs = query(sluice, "SELECT run_id FROM dag_run WHERE run_type = 'backfill'")
    assert len(runs) == 5
    sluice.scheduler()
    sluice.scheduler()

    for (run_id,) in runs:
        assert sluice.wait_run("fan", run_id, timeout=90) == "success"
    assert_all_once(log, [r for (r,) in runs], ["start", "join", "t0", "t1"])
    dead = query(sluice, "SELECT state FROM job WHERE job_type = 'backfill'")
    assert dead == [("failed",)]


def test_pool_never_overfilled_by_two_schedulers(sluice: Sluice, tmp_path: Path) -> None:
    log = tmp_path / "exec.log"
    write_fanout(sluice, log, width=10, sleep=1.0, pool="tight")
    sluice.ok("pools", "set", "tight", "2")
    sluice.run("dags", "list")
    sluice.scheduler()
    sluice.scheduler()
    sluice.worker(concurrency=4)
    sluice.worker(concurrency=4)
    run_id = sluice.trigger("fan")
    assert sluice.wait_run("fan", run_id, timeout=120) == "success"
    spans = query(
        sluice,
        "SELECT start_date, end_date FROM task_instance WHERE pool = 'tight' AND state = 'success'",
    )
    assert len(spans) == 10
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    running = peak = 0
    for _, delta in events:
        running += delta
        peak = max(peak, running)
    assert peak == 2


def test_scheduler_survives_terminated_connections(sluice: Sluice, tmp_path: Path) -> None:
    log = tmp_path / "exec.log"
    write_fanout(sluice, log, width=4, sleep=0.3)
    sluice.run("dags", "list")
    scheduler = sluice.scheduler()
    sluice.worker(concurrency=2)
    runs = trigger_many(sluice, "fan", 3)
    killed = 0
    for _ in range(4):
        time.sleep(0.7)
        killed += len(
            query(
                sluice,
                """
            SELECT pg_terminate_backend(pid) FROM pg_stat_activity
            WHERE datname = current_database() AND application_name = 'sluice-scheduler'
        """,
            )
        )
    assert killed > 0
    for run_id in runs:
        assert sluice.wait_run("fan", run_id, timeout=90) == "success"
    assert_all_once(log, runs, ["start", "join", *[f"t{i}" for i in range(4)]])
    assert scheduler.poll() is None
    assert json.loads(sluice.ok("tasks", "states", "fan", runs[0], "--json"))
