"""`DAG(dagrun_timeout=…)` and `@task(queued_timeout=…)` with a real scheduler and
workers: a run past its timeout ends failed and its running try is stopped; a try no
worker starts within its queued_timeout is retried, then failed, and the queued sweep's
re-publish does not extend it; a stale message of such a try never runs."""

from __future__ import annotations

import textwrap
from pathlib import Path

from tests.integration.test_cancel_run import rows
from tests.procs import Sluice, wait_until

DAGS = """
import time
from datetime import timedelta
from pathlib import Path
from sluice import DAG, task

MARKS = Path({marks!r})


def alert(context):
    with open(MARKS / "alerts", "a") as out:
        out.write(f"{{context['kind']}} {{context['task_id']}} {{context['try_number']}}\\n")


with DAG(
    "too_long", schedule=None, dagrun_timeout=timedelta(seconds=3), on_failure_callback=alert
) as dag:
    @task(on_failure_callback=alert)
    def slow():
        (MARKS / "slow-started").write_text("")
        for tick in range(600):
            time.sleep(0.1)
        (MARKS / "slow-finished").write_text("")

    @task
    def after():
        (MARKS / "after").write_text("")

    slow >> after

with DAG("unserved", schedule=None) as other:
    @task(
        queue="nowhere", queued_timeout=timedelta(seconds=2), retries=1, retry_delay=0,
        on_retry_callback=alert, on_failure_callback=alert,
    )
    def waits():
        (MARKS / "waits-ran").write_text("")
"""


def test_run_and_queued_timeouts(sluice: Sluice, tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    (sluice.dags_folder / "timeouts.py").write_text(textwrap.dedent(DAGS.format(marks=str(marks))))
    sluice.run("dags", "list")
    sluice.extra_env["SLUICE_QUEUED_TIMEOUT"] = "1"  # the sweep re-publishes after 1 s
    sluice.scheduler()
    sluice.worker()
    long_run = sluice.trigger("too_long")
    unserved = sluice.trigger("unserved")

    # the run past its dagrun_timeout fails; its running try is stopped, after never runs
    wait_until(lambda: sluice.db_run_state("too_long", long_run) == "failed", timeout=20)
    states = sluice.db_task_states("too_long", long_run)
    assert states["slow"]["state"] == "failed"
    assert "timed out" in states["slow"]["error"] and "3s" in states["slow"]["error"]
    assert states["after"]["state"] == "skipped"
    assert (marks / "slow-started").exists()

    # the try nobody serves is retried once, then fails, each within its 2 s though the
    # sweep re-published it every second
    wait_until(lambda: sluice.db_run_state("unserved", unserved) == "failed", timeout=20)
    ti = sluice.db_task_states("unserved", unserved)["waits"]
    assert (ti["state"], ti["try_number"]) == ("failed", 2)
    assert "queued_timeout" in ti["error"] and "2s" in ti["error"]
    [(republished,)] = rows(
        sluice.database_url,
        "SELECT published_at IS NOT NULL FROM task_instance WHERE task_id = 'waits'",
    )
    assert republished  # the sweep did re-publish, and the timeout held anyway
    # a worker on that queue now gets the stale messages: their claims lose, nothing runs
    sluice.worker(queues="nowhere")
    wait_until(lambda: "stale message" in worker_logs(sluice), timeout=20)
    assert not (marks / "waits-ran").exists()
    assert sluice.db_task_states("unserved", unserved)["waits"]["state"] == "failed"
    assert not (marks / "slow-finished").exists() and not (marks / "after").exists()
    # and the failures' alerts ran, once each
    expected = [
        "on_failure None None",
        "on_failure slow 1",
        "on_failure waits 2",
        "on_retry waits 1",
    ]
    alerts = marks / "alerts"
    wait_until(lambda: alerts.exists() and len(alerts.read_text().splitlines()) >= 4, timeout=20)
    assert sorted(alerts.read_text().splitlines()) == expected


def worker_logs(sluice: Sluice) -> str:
    return "".join(p.read_text(errors="replace") for p in sluice.log_dir.glob("worker-*.log"))
