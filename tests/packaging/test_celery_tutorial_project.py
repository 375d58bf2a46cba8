"""Sluice inside a project laid out as Celery's tutorial: the app is `tasks.py`.

The project's folder is the working directory and on PYTHONPATH, as `celery -A tasks
worker` wants it. Its one worker, started without `-Q`, serves the project's own `add`
(called with `delay()`) and Sluice's queue at once; a DAG calls `tasks.add` by name;
`sluice db migrate`, `sluice dags trigger` and `sluice scheduler` run from that folder (the
console script).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from tests.procs import Sluice

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


sluice.attach(app)
"""

DAG = """
from datetime import timedelta

from sluice import DAG, CeleryTask, Upstream, task

with DAG("tutorial", schedule=None) as dag:
    @task
    def extract():
        return 20

    add = CeleryTask("add", name="tasks.add", args=[Upstream("extract"), 22],
                     celery_queue="celery", timeout=timedelta(seconds=30))

    @task
    def report(context):
        return context["upstream"]["add"] + 1

    extract >> add >> report
"""


def test_tutorial_project_runs_its_tasks_and_sluices(sluice: Sluice, tmp_path: Path) -> None:
    # Given a Celery tutorial project (tasks.py) with Sluice attached, as the working folder
    project = tmp_path / "project"
    project.mkdir()
    (project / "tasks.py").write_text(textwrap.dedent(TASKS_PY))
    (sluice.dags_folder / "tutorial.py").write_text(textwrap.dedent(DAG))
    sluice.cwd = project
    sluice.argv = [str(Path(sys.executable).with_name("sluice"))]
    sluice.extra_env.update(PYTHONPATH=str(project), SLUICE_RESULT_BACKEND=sluice.broker_url)
    sluice.ok("db", "migrate")
    sluice.scheduler()
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "tasks", "worker", "-c", "2", "-l", "INFO"]
        + ["--without-mingle", "--without-gossip", "--without-heartbeat"],  # and no -Q
        env=sluice.env,
        cwd=project,
        stdout=open(sluice.log_dir / "their-worker.log", "wb"),  # noqa: SIM115
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    sluice.procs.append(worker)

    # When the project calls its own task, and a run calls it by name
    run_id = sluice.trigger("tutorial")
    delayed = subprocess.run(
        [sys.executable, "-c", "from tasks import add; print(add.delay(2, 3).get(timeout=30))"],
        env=sluice.env,
        cwd=project,
        capture_output=True,
        text=True,
        timeout=60,
    )

    # Then both work, on the one worker
    assert delayed.stdout.strip() == "5", delayed.stderr
    assert sluice.wait_run("tutorial", run_id) == "success"
    states = sluice.task_states("tutorial", run_id)
    assert {t: s["state"] for t, s in states.items()} == dict.fromkeys(
        ["extract", "add", "report"], "success"
    )
    assert states["extract"]["hostname"] and states["report"]["hostname"]
