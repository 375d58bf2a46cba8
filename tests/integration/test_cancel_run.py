"""`sluice dags cancel DAG_ID RUN_ID`: the run ends failed, its running try is stopped in
the worker whatever its pool, what was not started is skipped and never runs; bad input
changes nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import textwrap
import time
from pathlib import Path

import pytest
from sqlalchemy import text

from tests.engines import engine_for
from tests.procs import SLUICE, Sluice, wait_until, written

DAG = """
import time
from datetime import timedelta
from pathlib import Path
from sluice import DAG, task

MARKS = Path({marks!r})
STEP = {step!r}

def cancelled(context):
    with open(MARKS / "cancel-alerts", "a") as out:
        out.write(context["kind"] + " " + context["error"] + "\\n")


with DAG("cancel_me", schedule=None) as dag:
    @task(on_failure_callback=cancelled)
    def slow():
        (MARKS / "slow-started").write_text("")
        for tick in range(int(60 / STEP)):
            time.sleep(STEP)
            (MARKS / "ticks").write_text(str(tick))
        (MARKS / "slow-finished").write_text("")

    @task
    def after():
        (MARKS / "after").write_text("")

    slow >> after


def alert(context):
    with open(MARKS / "alerts", "a") as out:
        out.write(context["kind"] + " " + context["error"] + "\\n")


with DAG("times_out", schedule=None) as timed:
    @task(execution_timeout=timedelta(seconds=1), on_failure_callback=alert)
    def too_slow():
        for tick in range(int(60 / STEP)):
            time.sleep(STEP)
        (MARKS / "too-slow-finished").write_text("")
"""


def rows(url: str, sql: str) -> list[tuple[object, ...]]:
    with engine_for(url).connect() as conn:
        return [tuple(r) for r in conn.execute(text(sql))]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"


def write_dag(sluice: Sluice, tmp_path: Path, step: float = 60.0) -> Path:
    """The DAG; its slow task sleeps 60 s in steps of `step` seconds (a tick file each)."""
    marks = tmp_path / "marks"
    marks.mkdir()
    dag = DAG.format(marks=str(marks), step=step)
    (sluice.dags_folder / "cancel_me.py").write_text(textwrap.dedent(dag))
    sluice.run("dags", "list")
    return marks


def test_cancel_stops_the_running_try_and_fails_the_run(sluice: Sluice, tmp_path: Path) -> None:
    # Given a run whose first task sleeps 60 s in a prefork worker with one child
    marks = write_dag(sluice, tmp_path)
    sluice.scheduler()
    sluice.worker(concurrency=1)
    run_id = sluice.trigger("cancel_me")
    wait_until(lambda: (marks / "slow-started").exists(), timeout=30)
    [(pid,)] = rows(sluice.database_url, "SELECT pid FROM task_instance WHERE task_id = 'slow'")
    assert isinstance(pid, int) and alive(pid)
    # When it is cancelled
    done = sluice.cli("dags", "cancel", "cancel_me", run_id)
    assert done.returncode == 0, done.stderr
    assert "1 queued or running tries stopped" in done.stdout
    # Then within 5 s the task has ended in its process (Celery's revoke terminated the
    # child, or the worker's heartbeat stopped the try in it, whichever came first), the
    # run has failed, the task failed as cancelled and its downstream was skipped, never run
    wait_until(
        lambda: not alive(pid) or "stopped: the try is no longer running" in logs(sluice),
        timeout=5,
    )
    assert_cancelled(sluice, marks, run_id)
    # ... and `tasks explain` says who cancelled it and when
    said = sluice.ok("tasks", "explain", "cancel_me", run_id, "after")
    assert "cancel of the run by " in said and "(cli)" in said
    # ... and the worker's one slot is free: a new run's task runs, and is cancelled in turn
    (marks / "slow-started").unlink()
    again = sluice.trigger("cancel_me")
    wait_until(lambda: (marks / "slow-started").exists(), timeout=10)
    sluice.ok("dags", "cancel", "cancel_me", again)
    assert sluice.db_run_state("cancel_me", again) == "failed"
    assert_timeout_stops_and_alerts(sluice, marks)


def assert_timeout_stops_and_alerts(sluice: Sluice, marks: Path) -> None:
    """A task past its execution_timeout of 1 s is stopped, fails, and its alert runs once."""
    run_id = sluice.trigger("times_out")
    assert sluice.wait_run("times_out", run_id, timeout=30) == "failed"
    ti = sluice.db_task_states("times_out", run_id)["too_slow"]
    assert "timed out after 1s" in ti["error"]
    alerts = marks / "alerts"
    [line] = written(alerts).splitlines()
    assert line.startswith("on_failure TaskTimeout: task 'too_slow' timed out after 1s")
    assert not (marks / "too-slow-finished").exists()


def assert_cancelled(sluice: Sluice, marks: Path, run_id: str) -> None:
    # the cancelled try's on_failure callback runs once
    alerts = marks / "cancel-alerts"
    assert written(alerts).splitlines() == ["on_failure cancelled"]
    assert sluice.db_run_state("cancel_me", run_id) == "failed"
    states = sluice.db_task_states("cancel_me", run_id)
    assert (states["slow"]["state"], states["slow"]["error"]) == ("failed", "cancelled")
    assert states["after"]["state"] == "skipped"
    assert not (marks / "slow-finished").exists() and not (marks / "after").exists()


def ticking(marks: Path) -> bool:
    """Whether the slow task still writes ticks: one at least within a second."""

    def tick() -> str | None:
        return (marks / "ticks").read_text() if (marks / "ticks").exists() else None

    before = tick()
    time.sleep(1.0)
    return tick() != before


@pytest.mark.parametrize(("pool", "step"), [("threads", 0.1), ("solo", 60.0)])
def test_cancel_stops_a_try_in_a_threads_or_solo_worker(
    sluice: Sluice, tmp_path: Path, pool: str, step: float
) -> None:
    # Given a run whose task sleeps 60 s (threads: in steps of 0.1 s; solo: one sleep)
    # in a worker whose one slot runs tasks in its own process, where Celery's terminate
    # cannot reach
    marks = write_dag(sluice, tmp_path, step)
    sluice.scheduler()
    worker = sluice.start("worker", "worker", "-Q", "default", "-c", "1", "--pool", pool)
    run_id = sluice.trigger("cancel_me")
    wait_until(lambda: (marks / "slow-started").exists(), timeout=30)
    # When it is cancelled
    sluice.ok("dags", "cancel", "cancel_me", run_id)
    # Then within 5 s the task has stopped (no more ticks; a worker's heartbeat found its
    # try cancelled and stopped it) while the worker process lives on, and nothing of it
    # or after it ran
    wait_until(lambda: not ticking(marks), timeout=5)
    assert worker.poll() is None
    assert_cancelled(sluice, marks, run_id)
    # ... and the worker's one slot is free: the next run's task starts at once
    (marks / "slow-started").unlink()
    again = sluice.trigger("cancel_me")
    wait_until(lambda: (marks / "slow-started").exists(), timeout=10)
    sluice.ok("dags", "cancel", "cancel_me", again)
    # ... and execution_timeout stops a task in this pool too, and alerts
    assert_timeout_stops_and_alerts(sluice, marks)


def test_cancel_refuses_what_it_cannot_cancel_and_changes_nothing(
    sluice: Sluice, tmp_path: Path
) -> None:
    write_dag(sluice, tmp_path)
    run_id = sluice.trigger("cancel_me", "--run-id", "r1")
    sluice.ok("dags", "cancel", "cancel_me", run_id)  # a queued run: nothing had started
    assert sluice.db_run_state("cancel_me", run_id) == "failed"
    events = "SELECT count(*) FROM audit_log"
    assert rows(sluice.database_url, events) == [(1,)]
    for args, said in [
        (("nope", "r1"), "sluice: error: unknown DAG 'nope'"),
        (("cancel_me", "r2"), "sluice: error: DAG 'cancel_me' has no run 'r2'"),
        (("cancel_me", "r1"), "sluice: error: run 'r1' of DAG 'cancel_me' has already ended"),
    ]:
        refused = sluice.cli("dags", "cancel", *args)
        assert refused.returncode == 2, refused
        assert len(refused.stderr.strip().splitlines()) == 1
        assert refused.stderr.startswith(said), refused.stderr
    assert rows(sluice.database_url, events) == [(1,)]
    tis = "SELECT task_id, state FROM task_instance ORDER BY task_id"
    assert rows(sluice.database_url, tis) == [("after", "skipped"), ("slow", "skipped")]


def logs(sluice: Sluice) -> str:
    return "".join(p.read_text(errors="replace") for p in sluice.log_dir.glob("*.log"))


def test_cancel_stops_a_try_in_sluice_standalone(tmp_path: Path) -> None:
    # Given `sluice standalone --trigger` on SQLite, its task sleeping in 0.1 s steps on
    # the embedded (threads) worker
    dags = tmp_path / "dags"
    dags.mkdir()
    marks = tmp_path / "marks"
    marks.mkdir()
    (dags / "cancel_me.py").write_text(textwrap.dedent(DAG.format(marks=str(marks), step=0.1)))
    url = f"sqlite:///{tmp_path / 'standalone.db'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLUICE_", "OTEL_"))}
    env.update(
        SLUICE_DATABASE_URL=url,
        SLUICE_DAGS_FOLDER=str(dags),
        SLUICE_LOOP_INTERVAL="0.2",
        SLUICE_HEARTBEAT_INTERVAL="0.5",
    )
    proc = subprocess.Popen(
        [*SLUICE, "standalone", "--trigger", "cancel_me"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        wait_until(lambda: (marks / "slow-started").exists(), timeout=60)
        [(run_id,)] = rows(url, "SELECT run_id FROM dag_run")
        # When the run is cancelled from another process
        done = subprocess.run(
            [*SLUICE, "dags", "cancel", "cancel_me", str(run_id)],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        # Then the task stops, the run ends failed, and standalone exits on its own
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    assert proc.returncode == 1, out
    assert not ticking(marks)
    assert rows(url, "SELECT state FROM dag_run") == [("failed",)]
    tis = rows(url, "SELECT task_id, state, error FROM task_instance ORDER BY task_id")
    assert tis == [("after", "skipped", None), ("slow", "failed", "cancelled")]
    assert not (marks / "slow-finished").exists() and not (marks / "after").exists()
