"""The whole path, for real: DAG file → trigger → scheduler → Celery worker → states.

`sluice scheduler` and `sluice worker` run as subprocesses against this test's
PostgreSQL database and Redis db.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from tests.procs import Sluice, wait_until

HEADER = """
from datetime import timedelta
from pathlib import Path
from sluice import DAG, ShellTask, Skip, TriggerRule, task
LOG = Path({log!r})

def record(name):
    with open(LOG, "a") as f:
        f.write(name + "\\n")
"""


def write_dag(folder: Path, name: str, body: str, log: Path) -> Path:
    path = folder / f"{name}.py"
    path.write_text(HEADER.format(log=str(log)) + textwrap.dedent(body))
    return path


def executions(log: Path) -> list[str]:
    return log.read_text().split() if log.exists() else []


def test_chain_runs_to_success_with_upstream_results(sluice: Sluice, tmp_path: Path) -> None:
    log = tmp_path / "executions.log"
    write_dag(
        sluice.dags_folder,
        "chain",
        """
    with DAG("chain", schedule=None) as dag:
        @task
        def extract():
            record("extract")
            return {"rows": 3}

        @task
        def load(context):
            record("load")
            return context["upstream"]["extract"]["rows"] * 2 + context["try_number"]

        shell = ShellTask("shell", command="echo shell-ran-$SLUICE_TASK_ID")
        extract >> load >> shell
    """,
        log,
    )
    sluice.scheduler()
    sluice.worker()
    run_id = sluice.trigger("chain", "--run-id", "r1", "--conf", '{"x": 1}')
    assert run_id == "r1"

    assert sluice.wait_run("chain", "r1") == "success"
    assert sluice.run_state("chain", "r1") == "success"  # as `sluice dags state` prints it
    states = sluice.task_states("chain", "r1")
    assert {t: s["state"] for t, s in states.items()} == {
        "extract": "success",
        "load": "success",
        "shell": "success",
    }
    assert all(s["try_number"] == 1 and s["queue"] == "default" for s in states.values())
    assert states["load"]["start_date"] >= states["extract"]["end_date"]
    assert executions(log) == ["extract", "load"]


def test_retries_and_failure_flow_downstream(sluice: Sluice, tmp_path: Path) -> None:
    log = tmp_path / "executions.log"
    write_dag(
        sluice.dags_folder,
        "flaky",
        """
    with DAG("flaky", schedule=None) as dag:
        @task(retries=2, retry_delay=timedelta(milliseconds=100))
        def flaky(context):
            record(f"flaky-{context['try_number']}")
            if context["try_number"] < 2:
                raise RuntimeError("first try fails")

        @task(retries=1, retry_delay=timedelta(milliseconds=100))
        def broken():
            record("broken")
            raise ValueError("always broken")

        @task
        def after_broken():
            record("after_broken")

        @task(trigger_rule=TriggerRule.ALL_DONE)
        def cleanup():
            record("cleanup")

        broken >> after_broken
        [flaky, after_broken] >> cleanup
    """,
        log,
    )
    sluice.scheduler()
    sluice.worker()
    run_id = sluice.trigger("flaky")

    # The leaf `cleanup` succeeds (all_done), so Airflow's rule gives success.
    assert sluice.wait_run("flaky", run_id) == "success"
    states = sluice.task_states("flaky", run_id)
    assert states["flaky"]["state"] == "success" and states["flaky"]["try_number"] == 2
    assert states["broken"]["state"] == "failed" and states["broken"]["try_number"] == 2
    assert "always broken" in states["broken"]["error"]
    assert states["after_broken"]["state"] == "upstream_failed"
    assert states["cleanup"]["state"] == "success"
    assert sorted(executions(log)) == sorted(["flaky-1", "flaky-2", "broken", "broken", "cleanup"])


def test_skip_branch_and_trigger_rules(sluice: Sluice, tmp_path: Path) -> None:
    log = tmp_path / "executions.log"
    write_dag(
        sluice.dags_folder,
        "branchy",
        """
    with DAG("branchy", schedule=None) as dag:
        @task.branch
        def pick():
            return "left"

        @task
        def left():
            record("left")

        @task
        def right():
            record("right")

        @task(trigger_rule=TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS)
        def join():
            record("join")

        @task
        def skipper():
            raise Skip("nothing to do")

        @task
        def after_skip():
            record("after_skip")

        @task(trigger_rule=TriggerRule.NONE_SKIPPED)
        def none_skipped():
            record("none_skipped")

        @task(trigger_rule=TriggerRule.ALL_DONE)
        def always_last():
            record("always_last")

        pick >> [left, right] >> join
        skipper >> after_skip
        right >> none_skipped
        [join, after_skip, none_skipped] >> always_last
    """,
        log,
    )
    sluice.scheduler()
    sluice.worker()
    run_id = sluice.trigger("branchy")
    assert sluice.wait_run("branchy", run_id) == "success"
    got = {t: s["state"] for t, s in sluice.task_states("branchy", run_id).items()}
    assert got == {
        "pick": "success",
        "left": "success",
        "right": "skipped",
        "join": "success",
        "skipper": "skipped",
        "after_skip": "skipped",
        "none_skipped": "skipped",
        "always_last": "success",
    }
    assert sorted(executions(log)) == ["always_last", "join", "left"]


def test_task_on_unserved_queue_waits_for_its_worker(sluice: Sluice, tmp_path: Path) -> None:
    log = tmp_path / "executions.log"
    write_dag(
        sluice.dags_folder,
        "routed",
        """
    with DAG("routed", schedule=None) as dag:
        @task
        def light():
            record("light")

        @task(queue="heavy")
        def heavy():
            record("heavy")

        light >> heavy
    """,
        log,
    )
    sluice.scheduler()
    sluice.worker("default")
    run_id = sluice.trigger("routed")
    wait_until(lambda: sluice.task_states("routed", run_id)["heavy"]["state"] == "queued")
    assert sluice.db_run_state("routed", run_id) == "running"
    assert executions(log) == ["light"]

    sluice.worker("heavy", concurrency=1)
    assert sluice.wait_run("routed", run_id) == "success"
    heavy = sluice.task_states("routed", run_id)["heavy"]
    assert heavy["queue"] == "heavy" and heavy["try_number"] == 1
    assert executions(log) == ["light", "heavy"]


def test_execution_timeout_fails_the_task(sluice: Sluice, tmp_path: Path) -> None:
    log = tmp_path / "executions.log"
    write_dag(
        sluice.dags_folder,
        "slow",
        """
    import time
    with DAG("slow", schedule=None) as dag:
        @task(execution_timeout=timedelta(seconds=1))
        def slow():
            record("slow")
            time.sleep(30)
    """,
        log,
    )
    sluice.scheduler()
    sluice.worker()
    run_id = sluice.trigger("slow")
    assert sluice.wait_run("slow", run_id, timeout=30) == "failed"
    ti = sluice.task_states("slow", run_id)["slow"]
    assert ti["state"] == "failed"
    assert "timed out" in ti["error"].lower() or "timeout" in ti["error"].lower()


def test_verify_integrity_adds_and_removes_tasks(sluice: Sluice, tmp_path: Path) -> None:
    log = tmp_path / "executions.log"
    body = """
    with DAG("evolving", schedule=None) as dag:
        @task
        def first():
            record("first")

        @task
        def {second}():
            record("{second}")

        first >> {second}
    """
    path = write_dag(sluice.dags_folder, "evolving", body.format(second="old"), log)
    run_id = sluice.trigger("evolving")  # TIs exist from creation, no scheduler yet
    assert set(sluice.task_states("evolving", run_id)) == {"first", "old"}
    write_dag(sluice.dags_folder, "evolving", body.format(second="new"), log)
    assert path.exists()

    sluice.scheduler()
    wait_until(lambda: "new" in sluice.db_stored_tasks("evolving"))  # parsed beside its loop
    sluice.worker()
    assert sluice.wait_run("evolving", run_id) == "success"
    got = {t: s["state"] for t, s in sluice.task_states("evolving", run_id).items()}
    assert got == {"first": "success", "old": "removed", "new": "success"}
    assert sorted(executions(log)) == ["first", "new"]


def test_task_dropped_while_its_upstream_runs_is_removed_not_failed(
    sluice: Sluice, tmp_path: Path
) -> None:
    # Given a run whose "first" runs, and no scheduler to look at the run meanwhile
    log, gate = tmp_path / "executions.log", tmp_path / "first.gate"
    body = """
    import os, time

    with DAG("dropping", schedule=None) as dag:
        @task
        def first():
            record("first")
            deadline = time.monotonic() + 60
            while not os.path.exists({gate!r}) and time.monotonic() < deadline:
                time.sleep(0.02)

        @task
        def kept():
            record("kept")

        first >> kept
        {gone}
    """
    gone = '@task\n        def gone():\n            record("gone")\n\n        first >> gone'
    write_dag(sluice.dags_folder, "dropping", body.format(gate=str(gate), gone=gone), log)
    scheduler = sluice.scheduler()
    sluice.worker()
    run_id = sluice.trigger("dropping")
    wait_until(lambda: sluice.db_task_states("dropping", run_id)["first"]["state"] == "running")
    sluice.stop(scheduler)
    # When the DAG file drops "gone", its new version is stored (`sluice dags list`
    # syncs the folder), and only then does "first" end: the worker that ran it queues
    # what follows from the run's rows, which still have "gone"
    write_dag(sluice.dags_folder, "dropping", body.format(gate=str(gate), gone=""), log)
    sluice.run("dags", "list")
    assert sluice.db_stored_tasks("dropping") == {"first", "kept"}
    gate.touch()
    wait_until(lambda: sluice.db_task_states("dropping", run_id)["kept"]["state"] == "success")
    # Then "gone" is removed, as the scheduler's check of the run would have it, not failed;
    # it never ran, and the run succeeds once a scheduler looks at it
    ended = {"removed", "failed", "up_for_retry", "success"}
    wait_until(lambda: sluice.db_task_states("dropping", run_id)["gone"]["state"] in ended)
    gone_ti = sluice.db_task_states("dropping", run_id)["gone"]
    assert (gone_ti["state"], gone_ti["error"]) == ("removed", None)
    sluice.scheduler()
    assert sluice.wait_run("dropping", run_id) == "success"
    got = {t: s["state"] for t, s in sluice.task_states("dropping", run_id).items()}
    assert got == {"first": "success", "kept": "success", "gone": "removed"}
    assert sorted(executions(log)) == ["first", "kept"]


def test_clear_runs_tasks_again(sluice: Sluice, tmp_path: Path) -> None:
    log = tmp_path / "executions.log"
    write_dag(
        sluice.dags_folder,
        "again",
        """
    with DAG("again", schedule=None) as dag:
        @task
        def a():
            record("a")

        @task
        def b():
            record("b")

        a >> b
    """,
        log,
    )
    sluice.scheduler()
    sluice.worker()
    run_id = sluice.trigger("again")
    assert sluice.wait_run("again", run_id) == "success"
    sluice.ok("tasks", "clear", "again", run_id, "--task", "b")
    wait_until(lambda: executions(log) == ["a", "b", "b"], timeout=30)
    assert sluice.wait_run("again", run_id) == "success"
    assert sluice.task_states("again", run_id)["b"]["try_number"] == 2
