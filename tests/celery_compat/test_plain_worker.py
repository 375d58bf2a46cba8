"""`sluice.attach(app)` and the plain `celery -A tasks worker` a Celery project already runs.

A project laid out as Celery's tutorial (`tasks.py` holds `app` and calls `sluice.attach`),
its folder the working directory and on PYTHONPATH. Its worker is started as its user
types it: no `-Q`. Issue 39, item 2: that worker serves the app's own default queue and
Sluice's `<namespace>.default` and `<namespace>.callbacks` (and the queues named in
`attach(app, queues=[...])`); `attach(app, consume=False)` serves none of Sluice's; a worker
whose explicit `-Q` leaves out every Sluice queue says so once, as a WARNING, at start.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.procs import Sluice, wait_until, written

CELERY = str(Path(sys.executable).with_name("celery"))
"""The `celery` console script of this environment, as a user's shell finds it."""

TASKS_PY = """
import os

from celery import Celery

import sluice

app = Celery("tasks", broker=os.environ["SLUICE_BROKER_URL"],
             backend=os.environ["SLUICE_BROKER_URL"])
app.conf.update(task_serializer="json", result_serializer="json", accept_content=["json"],
                broker_connection_retry_on_startup=True)


@app.task
def add(x, y):
    return x + y


sluice.attach(app{attach_args})
"""


def project(sluice: Sluice, attach_args: str = "") -> Path:
    """The user's project folder: `tasks.py` with `sluice.attach(app<attach_args>)`."""
    folder = sluice.log_dir.parent / "project"
    folder.mkdir()
    (folder / "tasks.py").write_text(textwrap.dedent(TASKS_PY.format(attach_args=attach_args)))
    return folder


def celery_worker(sluice: Sluice, folder: Path, *args: str) -> Path:
    """`celery -A tasks worker ARGS` started in the project's folder; its log file."""
    log = sluice.log_dir / f"celery-worker-{len(sluice.procs)}.log"
    proc = subprocess.Popen(
        [CELERY, "-A", "tasks", "worker", *args],
        env={**sluice.env, "PYTHONPATH": str(folder)},
        cwd=folder,
        stdout=open(log, "wb"),  # noqa: SIM115
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    sluice.procs.append(proc)
    return log


def ready(log: Path) -> str:
    """The worker's output once it says it is ready (else the empty string)."""
    text = log.read_text(errors="replace")
    return text if " ready." in text else ""


def banner_queues(output: str) -> list[str]:
    """The queue names of the startup banner's `[queues]` section (`.> name  exchange=…`)."""
    section = output.split("[queues]", 1)[1].split("[tasks]", 1)[0]
    return [line.split()[1] for line in section.splitlines() if line.strip().startswith(".>")]


def sluice_warnings(output: str) -> list[str]:
    return [line for line in output.splitlines() if "WARNING" in line and "Sluice" in line]


def write_dag(sluice: Sluice, name: str, body: str) -> None:
    (sluice.dags_folder / f"{name}.py").write_text(
        "from sluice import DAG, task\n" + textwrap.dedent(body)
    )


def test_a_plain_celery_worker_serves_the_apps_queue_sluices_and_its_callbacks(
    sluice: Sluice,
) -> None:
    # Given the tutorial project with `sluice.attach(app)`, its worker started with no -Q,
    # and a DAG of two tasks whose run's success calls back a function of the DAG file
    folder = project(sluice)
    called = sluice.log_dir / "callback.json"
    write_dag(
        sluice,
        "plain",
        f"""
        import json

        def record(context):
            with open({str(called)!r}, "w") as out:
                json.dump({{"run_id": context["run_id"], "kind": context["kind"]}}, out)

        with DAG("plain", schedule=None, on_success_callback=record) as dag:
            @task
            def extract():
                return 20

            @task
            def report(context):
                return context["upstream"]["extract"] + 1

            extract >> report
        """,
    )
    sluice.scheduler()
    log = celery_worker(sluice, folder, "-c", "2", "--loglevel", "INFO")

    # When a run goes, and the project calls its own task with delay()
    run_id = sluice.trigger("plain")
    delayed = subprocess.run(
        [sys.executable, "-c", "from tasks import add; print(add.delay(2, 3).get(timeout=30))"],
        env={**sluice.env, "PYTHONPATH": str(folder)},
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=60,
    )

    # Then the app's task ran (its default queue), the run's tasks ran on that worker
    # (Sluice's default queue), and the run's callback was delivered (the callbacks queue)
    assert delayed.stdout.strip() == "5", f"{delayed.stderr}\n{sluice.logs()}"
    assert sluice.wait_run("plain", run_id, timeout=40) == "success"
    states = sluice.db_task_states("plain", run_id)
    assert {t: s["state"] for t, s in states.items()} == {"extract": "success", "report": "success"}
    output = wait_until(lambda: ready(log), timeout=10)
    assert "Task plain.extract[" in log.read_text() and "Task plain.report[" in log.read_text()
    assert json.loads(written(called)) == {"run_id": run_id, "kind": "on_success"}
    ns = sluice.namespace
    assert sorted(banner_queues(output)) == ["celery", f"{ns}.callbacks", f"{ns}.default"]
    assert sluice_warnings(output) == []
    # and `sluice status` sees that worker serve both Sluice queues
    workers = json.loads(sluice.ok("status", "--json", "--workers-timeout", "1"))["workers"]
    assert sorted(workers) == ["callbacks", "default"], workers
    assert workers["default"] == workers["callbacks"] and workers["default"][0].startswith(
        "celery@"
    )


def test_attach_with_named_queues_serves_them_on_the_plain_worker(sluice: Sluice) -> None:
    # Given `sluice.attach(app, queues=["heavy"])` and a DAG whose one task is routed to
    # Sluice queue "heavy"
    folder = project(sluice, attach_args=', queues=["heavy"]')
    write_dag(
        sluice,
        "weighty",
        """
        with DAG("weighty", schedule=None) as dag:
            task(task_id="crunch", queue="heavy")(lambda: 42)
        """,
    )
    sluice.scheduler()
    log = celery_worker(sluice, folder, "-c", "2", "--loglevel", "INFO")

    # When a run goes; Then the plain worker ran the heavy task
    run_id = sluice.trigger("weighty")
    assert sluice.wait_run("weighty", run_id, timeout=40) == "success"
    output = wait_until(lambda: ready(log), timeout=10)
    assert "Task weighty.crunch[" in log.read_text()
    ns = sluice.namespace
    assert sorted(banner_queues(output)) == [
        "celery",
        f"{ns}.callbacks",
        f"{ns}.default",
        f"{ns}.heavy",
    ]


def test_a_producer_only_app_consumes_no_sluice_queue(sluice: Sluice) -> None:
    # Given `sluice.attach(app, consume=False)`, its plain worker ready, and a run queued
    folder = project(sluice, attach_args=", consume=False")
    write_dag(
        sluice,
        "waiting",
        """
        with DAG("waiting", schedule=None) as dag:
            task(task_id="only")(lambda: None)
        """,
    )
    log = celery_worker(sluice, folder, "-c", "1", "--loglevel", "INFO")
    sluice.scheduler()
    run_id = sluice.trigger("waiting")
    output = wait_until(lambda: ready(log), timeout=20)
    wait_until(lambda: sluice.db_task_states("waiting", run_id)["only"]["state"] == "queued")

    # Then the worker consumes only the app's own queue, says nothing about it (its app
    # asked for that), and `tasks explain` finds no live worker serving Sluice's queue
    assert banner_queues(output) == ["celery"]
    assert sluice_warnings(log.read_text()) == []
    explained = json.loads(sluice.ok("tasks", "explain", "waiting", run_id, "only", "--json"))
    assert [r["kind"] for r in explained["reasons"]] == ["queued", "no_worker"], explained
    assert explained["reasons"][0]["celery_queue"] == f"{sluice.namespace}.default"
    assert explained["reasons"][0]["served"] is False
    status = json.loads(sluice.ok("status", "--json", "--workers-timeout", "1"))
    assert status["task_instances"] == {"default": {"queued": 1}}
    assert status["workers"] == {}, status
    assert sluice.db_task_states("waiting", run_id)["only"]["state"] == "queued"


def test_an_explicit_q_without_sluice_queues_warns_once_at_start(sluice: Sluice) -> None:
    # Given `sluice.attach(app)`; When its worker is started with -Q naming only the app's
    # own queue
    folder = project(sluice)
    log = celery_worker(
        sluice,
        folder,
        "-Q",
        "celery",
        "-c",
        "1",
        "--loglevel",
        "INFO",
        "--without-mingle",
        "--without-gossip",
        "--without-heartbeat",
    )
    output = wait_until(lambda: ready(log), timeout=20)

    # Then it consumes what -Q says, and one WARNING line names the Sluice queues it leaves
    ns = sluice.namespace
    assert banner_queues(output) == ["celery"]
    [warning] = sluice_warnings(output)
    assert f"{ns}.default, {ns}.callbacks" in warning
