"""Sluice with RabbitMQ as the broker (a vhost of the test's own): a DAG with a fan-out,
a branch and a shell task runs to success, a worker decides the hops, a task's
callback runs once on the callback queue, a cancel stops a running try, wake-ups go
through Redis beside it or through PostgreSQL without it, a killed worker's task is
retried once and messages the broker lost are sent again."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path
from urllib.parse import urlparse

from tests.conftest import rabbitmqctl
from tests.integration.test_cancel_run import DAG as CANCEL_DAG
from tests.integration.test_cancel_run import assert_cancelled, logs, rows
from tests.integration.test_ha import broker_losing_messages, worker_killed_mid_task
from tests.procs import Sluice, wait_until

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "dags"


def test_a_dag_runs_and_a_run_is_cancelled_over_rabbitmq(
    sluice_on_rabbitmq: Sluice, tmp_path: Path
) -> None:
    sluice = sluice_on_rabbitmq
    assert sluice.broker_url.startswith("amqp://")
    shutil.copy(EXAMPLES / "example_etl.py", sluice.dags_folder / "example_etl.py")
    marks = tmp_path / "marks"
    marks.mkdir()
    dag = CANCEL_DAG.format(marks=str(marks), step=60.0)
    (sluice.dags_folder / "cancel_me.py").write_text(textwrap.dedent(dag))
    sluice.run("dags", "list")
    sluice.scheduler()
    sluice.worker(concurrency=2)

    # the example DAG: fan-out, branch, shell task, and its run's callback, once
    run_id = sluice.trigger("example_etl")
    assert sluice.wait_run("example_etl", run_id) == "success"
    states = {t: s["state"] for t, s in sluice.db_task_states("example_etl", run_id).items()}
    assert states["alert"] == "skipped" and states["done"] == "success"
    said = f"callback: example_etl {run_id} ended success"
    wait_until(lambda: said in logs(sluice), timeout=20)
    assert logs(sluice).count(said) == 1

    # a cancel stops the running try (revoked over AMQP, or stopped by its heartbeat)
    cancelled = sluice.trigger("cancel_me")
    wait_until(lambda: (marks / "slow-started").exists(), timeout=30)
    sluice.ok("dags", "cancel", "cancel_me", cancelled)
    assert_cancelled(sluice, marks, cancelled)


def test_wakeups_go_through_redis_beside_rabbitmq(
    sluice_on_rabbitmq: Sluice, redis_url: str
) -> None:
    # Given RabbitMQ as the broker, Redis for the wake-ups, and a scheduler whose loop
    # waits 30 s: only wake-ups can carry a run through quickly
    sluice = sluice_on_rabbitmq
    sluice.extra_env.update(SLUICE_WAKEUP_URL=redis_url, SLUICE_LOOP_INTERVAL="30")
    shutil.copy(EXAMPLES / "example_hello.py", sluice.dags_folder / "example_hello.py")
    sluice.run("dags", "list")
    sluice.scheduler()
    sluice.worker(concurrency=1)
    # When a run is triggered (the CLI wakes the scheduler, the worker wakes it to end it)
    run_id = sluice.trigger("example_hello")
    # Then it is done long before a 30 s loop would have looked
    assert sluice.wait_run("example_hello", run_id, timeout=15) == "success"


def test_wakeups_go_through_postgresql_when_there_is_no_redis(
    sluice_on_rabbitmq: Sluice,
) -> None:
    # Given RabbitMQ as the broker, no Redis anywhere, and a scheduler whose loop waits
    # 30 s: only wake-ups (PostgreSQL notifications) can carry runs through quickly
    sluice = sluice_on_rabbitmq
    sluice.extra_env.update(SLUICE_LOOP_INTERVAL="30")
    assert "SLUICE_WAKEUP_URL" not in sluice.extra_env
    shutil.copy(EXAMPLES / "example_etl.py", sluice.dags_folder / "example_etl.py")
    sluice.run("dags", "list")
    sluice.scheduler()
    sluice.worker(concurrency=2)
    wait_until(lambda: "sluice-waker-listen" in _applications(sluice), timeout=20)
    # When runs are triggered one after another (the CLI wakes the scheduler to start
    # each; the worker wakes it to end each)
    for _ in range(2):
        run_id = sluice.trigger("example_etl")
        # Then each is done long before a 30 s loop would have looked
        assert sluice.wait_run("example_etl", run_id, timeout=20) == "success"


def _applications(sluice: Sluice) -> str:
    found = rows(
        sluice.database_url,
        "SELECT application_name FROM pg_stat_activity WHERE datname = current_database()",
    )
    return " ".join(str(r[0]) for r in found)


def test_a_worker_killed_mid_task_on_rabbitmq_retries_it_once(
    sluice_on_rabbitmq: Sluice, tmp_path: Path
) -> None:
    # RabbitMQ gives the killed worker's unacknowledged message back at once: its claim
    # loses (the try is the killed worker's), the heartbeat's timeout retries the task
    worker_killed_mid_task(sluice_on_rabbitmq, tmp_path)


def test_messages_rabbitmq_lost_are_sent_again(sluice_on_rabbitmq: Sluice, tmp_path: Path) -> None:
    vhost = urlparse(sluice_on_rabbitmq.broker_url).path.lstrip("/")

    def purge() -> None:
        queues = rabbitmqctl("list_queues", "--no-table-headers", "-p", vhost, "name", "messages")
        waiting = [line.split() for line in queues.splitlines() if line.strip()]
        assert sum(int(count) for _, count in waiting) > 0
        for name, _ in waiting:
            rabbitmqctl("purge_queue", "-p", vhost, name)

    broker_losing_messages(sluice_on_rabbitmq, tmp_path, purge)
