"""CeleryTask end to end, beside a user's Celery app.

One worker process of the user's app (`celery -A tests.celery_compat.their_worker worker
-Q their_queue,<ns>.default`, the app calling `sluice.attach`) serves both the
user's own tasks and Sluice's; a real `sluice scheduler` subprocess drives the runs and
polls the external tasks' results; the tests also call `scheduler.jobs.celery_poller.poll_once`
while they wait (TIs are polled SKIP LOCKED, so both can). A local backfill polls them
itself, with no scheduler running.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from sluice.scheduler.core.db import make_engine, make_session_factory, utcnow
from sluice.scheduler.core.settings import Settings
from sluice.scheduler.jobs.celery_poller import poll_once
from sluice.tasks.celery_task import external_id_for
from tests.celery_compat.their_app import THEIR_QUEUE, make_app
from tests.procs import Sluice, wait_until, written

ROOT = Path(__file__).resolve().parents[2]


def their_worker(
    sluice: Sluice, queues: str | None = None, backend_url: str | None = None
) -> subprocess.Popen[bytes]:
    """The user's worker, serving `queues` (default: their queue and Sluice's default),
    its results in `backend_url` (default: the broker's Redis)."""
    log = open(sluice.log_dir / f"their-worker-{len(sluice.procs)}.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "tests.celery_compat.their_worker", "worker"]
        + ["-Q", queues or f"{THEIR_QUEUE},{sluice.namespace}.default,{sluice.namespace}.callbacks"]
        + ["-c", "4", "-l", "INFO"]
        + ["--without-mingle", "--without-gossip", "--without-heartbeat"],
        env={
            **sluice.env,
            "THEIR_BROKER_URL": sluice.broker_url,
            "THEIR_BACKEND_URL": backend_url or sluice.broker_url,
            "THEIR_CALLBACK_LOG": str(sluice.log_dir / "their-callbacks.jsonl"),
        },
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    sluice.procs.append(proc)
    return proc


@pytest.fixture
def poller(sluice: Sluice) -> Settings:
    """The settings a wired scheduler would poll with: results in the test's Redis db."""
    return Settings(
        database_url=sluice.database_url,
        broker_url=sluice.broker_url,
        namespace=sluice.namespace,
        result_backend=sluice.broker_url,
    )


def drive(sluice: Sluice, settings: Settings, dag_id: str, run_id: str, timeout: float) -> str:
    """Poll the external tasks (as the wired scheduler will) until the run finishes."""
    engine = make_engine(settings.database_url)
    factory = make_session_factory(engine)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            poll_once(factory, settings, utcnow())
            if sluice.db_run_state(dag_id, run_id) in ("success", "failed"):
                return sluice.run_state(dag_id, run_id)
            time.sleep(0.2)
    finally:
        engine.dispose()
    raise AssertionError(
        f"run {run_id} did not finish: {sluice.task_states(dag_id, run_id)}\n{sluice.logs()}"
    )


MIXED = """
with DAG("mixed", schedule=None{callback}) as dag:
    @task
    def extract():
        return 20

    add = CeleryTask("add", name="their_module.add", args=[Upstream("extract"), 22],
                     timeout=timedelta(seconds=30))

    @task
    def report(context):
        return context["upstream"]["add"] + 1

    extract >> add >> report
"""
"""python -> their_module.add(upstream result, 22) -> python; `callback` may add the
run's callback to the DAG's arguments."""


def write_dag(sluice: Sluice, name: str, body: str) -> None:
    header = (
        "from datetime import timedelta\n"
        "from sluice import DAG, CeleryTask, TriggerRule, Upstream, task\n"
    )
    (sluice.dags_folder / f"{name}.py").write_text(header + textwrap.dedent(body))


def test_dag_mixes_python_tasks_and_their_task_on_one_worker(
    sluice: Sluice, poller: Settings
) -> None:
    # Given a DAG: python -> their_module.add(upstream result, 22) -> python
    write_dag(sluice, "mixed", MIXED.format(callback=', on_success_callback="their_module.record"'))
    sluice.extra_env["SLUICE_RESULT_BACKEND"] = sluice.broker_url  # the scheduler polls it
    sluice.scheduler()
    their_worker(sluice)
    their_app = make_app(sluice.broker_url)

    # When the run goes while the user keeps calling their task with delay()
    run_id = sluice.trigger("mixed", "--run-id", "r1")
    assert their_app.tasks["their_module.add"].delay(2, 3).get(timeout=20) == 5
    state = drive(sluice, poller, "mixed", run_id, timeout=40)
    assert their_app.tasks["their_module.add"].delay(4, 5).get(timeout=20) == 9

    # Then every task succeeded, the external result flowed downstream
    assert state == "success"
    states = sluice.task_states("mixed", run_id)
    assert {t: s["state"] for t, s in states.items()} == dict.fromkeys(
        ["extract", "add", "report"], "success"
    )
    engine = make_engine(sluice.database_url)
    with engine.connect() as conn:
        rows: dict[str, Any] = dict(
            conn.execute(
                text("SELECT task_id, result FROM task_instance WHERE run_id = :r"), {"r": run_id}
            ).all()
        )
        add_ti = conn.execute(
            text("SELECT attempt_id, external_id FROM task_instance WHERE task_id = 'add'")
        ).one()
    engine.dispose()
    assert rows == {"extract": "20", "add": "42", "report": "43"}
    assert add_ti.external_id == external_id_for(add_ti.attempt_id)
    # and the worker's log names Sluice's tasks dag_id.task_id (Celery's shadow name)
    worker_log = "\n".join(p.read_text() for p in sluice.log_dir.glob("their-worker-*.log"))
    assert "Task mixed.extract[" in worker_log
    assert f"Task their_module.add[{add_ti.external_id}]" in worker_log
    # and the run's callback, a task of their app by name, ran once on their worker
    called = sluice.log_dir / "their-callbacks.jsonl"
    [context] = [json.loads(line) for line in written(called).splitlines()]
    assert (context["dag_id"], context["run_id"], context["state"]) == ("mixed", run_id, "success")
    assert context["kind"] == "on_success" and context["task_id"] is None


def test_their_app_on_rabbitmq_runs_sluice_and_their_task(
    sluice_on_rabbitmq: Sluice, redis_url: str
) -> None:
    # Given the user's app on RabbitMQ (results in a Redis, as many stacks have it) with
    # Sluice attached, and a DAG: python -> their_module.add -> python
    sluice = sluice_on_rabbitmq
    write_dag(sluice, "mixed", MIXED.format(callback=""))
    sluice.extra_env["SLUICE_RESULT_BACKEND"] = redis_url  # the scheduler polls it
    sluice.scheduler()
    their_worker(sluice, backend_url=redis_url)
    their_app = make_app(sluice.broker_url, backend_url=redis_url)

    # When a run goes while the user keeps calling their task over AMQP
    run_id = sluice.trigger("mixed", "--run-id", "r1")
    assert their_app.tasks["their_module.add"].delay(2, 3).get(timeout=20) == 5
    assert sluice.wait_run("mixed", run_id, timeout=40) == "success"

    # Then their task's result flowed downstream, and their worker ran Sluice's tasks
    engine = make_engine(sluice.database_url)
    with engine.connect() as conn:
        rows: dict[str, Any] = dict(
            conn.execute(
                text("SELECT task_id, result FROM task_instance WHERE run_id = :r"), {"r": run_id}
            ).all()
        )
    engine.dispose()
    assert rows == {"extract": "20", "add": "42", "report": "43"}
    worker_log = "\n".join(p.read_text() for p in sluice.log_dir.glob("their-worker-*.log"))
    assert "Task mixed.extract[" in worker_log and "Task mixed.report[" in worker_log


def test_failure_retry_and_timeout(sluice: Sluice, poller: Settings, tmp_path: Path) -> None:
    marker = tmp_path / "flaky-called"
    write_dag(
        sluice,
        "outcomes",
        f"""
        with DAG("outcomes", schedule=None) as dag:
            flaky = CeleryTask("flaky", name="their_module.flaky", args=[{str(marker)!r}],
                               retries=1, retry_delay=timedelta(milliseconds=100))
            boom = CeleryTask("boom", name="their_module.boom", retries=0)
            slow = CeleryTask("slow", name="their_module.sleep", args=[4],
                              timeout=timedelta(seconds=1))

            @task(trigger_rule=TriggerRule.ALL_DONE)
            def done():
                return "done"

            [flaky, boom, slow] >> done
        """,
    )
    sluice.extra_env["SLUICE_RESULT_BACKEND"] = sluice.broker_url  # the scheduler polls it
    sluice.scheduler()
    their_worker(sluice)

    run_id = sluice.trigger("outcomes")
    state = drive(sluice, poller, "outcomes", run_id, timeout=40)

    assert state == "success"  # the leaf `done` (all_done) succeeded
    states = sluice.task_states("outcomes", run_id)
    assert states["flaky"]["state"] == "success" and states["flaky"]["try_number"] == 2
    assert states["boom"]["state"] == "failed" and states["boom"]["try_number"] == 1
    assert "their_module.boom" in states["boom"]["error"]
    assert "ValueError: boom" in states["boom"]["error"]
    assert states["slow"]["state"] == "failed"
    assert "timed out after 1s" in states["slow"]["error"]
    assert "revoked" in states["slow"]["error"]
    assert states["done"]["state"] == "success"


def test_a_local_backfill_waits_for_their_task_without_a_scheduler(sluice: Sluice) -> None:
    """`sluice backfill --local` runs the Python tasks in its own process and polls the
    external task's result itself: no scheduler is running."""
    write_dag(
        sluice,
        "mixed_backfill",
        """
        from datetime import datetime, timezone

        with DAG("mixed_backfill", schedule="@daily",
                 start_date=datetime(2026, 1, 1, tzinfo=timezone.utc)) as dag:
            @task
            def extract():
                return 40

            add = CeleryTask("add", name="their_module.add", args=[Upstream("extract"), 2],
                             timeout=timedelta(seconds=30))

            @task
            def report(context):
                return context["upstream"]["add"] + 1

            extract >> add >> report
        """,
    )
    sluice.run("dags", "list")  # stored, as a deployed DAG is
    sluice.extra_env["SLUICE_RESULT_BACKEND"] = sluice.broker_url
    their_worker(sluice)

    done = sluice.cli(
        "backfill",
        "mixed_backfill",
        "--start",
        "2026-05-01",
        "--end",
        "2026-05-01",
        "--local",
        timeout=60,
    )

    assert done.returncode == 0, f"{done.stderr}\n{sluice.logs()}"
    engine = make_engine(sluice.database_url)
    with engine.connect() as conn:
        rows: dict[str, Any] = dict(
            conn.execute(
                text(
                    "SELECT task_id, result FROM task_instance WHERE dag_id = 'mixed_backfill'"
                    " AND state = 'success'"
                )
            ).all()
        )
        run_state = conn.execute(
            text("SELECT state FROM dag_run WHERE dag_id = 'mixed_backfill'")
        ).scalar()
    engine.dispose()
    assert run_state == "success"
    assert rows == {"extract": "40", "add": "42", "report": "43"}


@pytest.mark.parametrize("operation", ["clear", "cancel"])
def test_clearing_or_cancelling_a_running_celery_task_revokes_its_external_task(
    sluice: Sluice, operation: str
) -> None:
    """`sluice tasks clear` of a CeleryTask try that is waiting on its external task, or
    `sluice dags cancel` of its run, revokes that task on the user's workers (its result
    would be ignored anyway)."""
    write_dag(
        sluice,
        "slow_one",
        """
        with DAG("slow_one", schedule=None) as dag:
            CeleryTask("nap", name="their_module.sleep", args=[6],
                       timeout=timedelta(seconds=60))
        """,
    )
    sluice.extra_env["SLUICE_RESULT_BACKEND"] = sluice.broker_url
    sluice.scheduler()
    their_worker(sluice)
    run_id = sluice.trigger("slow_one")
    engine = make_engine(sluice.database_url)

    def external_id() -> str | None:
        with engine.connect() as conn:
            return conn.execute(
                text("SELECT external_id FROM task_instance WHERE dag_id = 'slow_one'")
            ).scalar()

    try:
        external = wait_until(external_id, timeout=30)
    finally:
        engine.dispose()

    if operation == "clear":
        sluice.ok("tasks", "clear", "slow_one", run_id, "--task", "nap")
    else:
        sluice.ok("dags", "cancel", "slow_one", run_id)
        assert sluice.db_run_state("slow_one", run_id) == "failed"

    def flagged() -> bool:
        logs = "\n".join(p.read_text() for p in sluice.log_dir.glob("their-worker-*.log"))
        return f"Tasks flagged as revoked: {external}" in logs

    wait_until(flagged, timeout=20)
