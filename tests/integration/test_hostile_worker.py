"""What a task or a message throws at a worker does not wedge a try (real PostgreSQL).

The scheduler's tick and the worker's `run_task_instance` run in this process
(`test_worker_downstream.Harness`); each test checks what a user sees (the TI's state
and error) and that the run goes on afterwards.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from sqlalchemy import select

from sluice.broker.worker.runner import Outcome
from sluice.scheduler.core.models import TaskInstance
from tests.integration import test_worker_downstream
from tests.integration.test_worker_downstream import Harness

harness = test_worker_downstream.harness

UNSTORABLE = """
from sluice import DAG, task

def nul():
    raise ValueError("a\\x00b")

def surrogate():
    raise ValueError("x\\ud800y")

with DAG("unstorable", schedule=None) as dag:
    task(task_id="nul")(nul)
    task(task_id="surrogate")(surrogate)
    task(task_id="fine")(lambda: 1)
"""


def errors(harness: Harness) -> dict[str, tuple[str, str | None]]:
    with harness.factory() as session:
        rows = session.execute(
            select(TaskInstance.task_id, TaskInstance.state, TaskInstance.error)
        ).all()
    return {task_id: (state, error) for task_id, state, error in rows}


def test_an_error_that_cannot_be_stored_is_cleaned_not_lost(harness: Harness) -> None:
    """A NUL (which PostgreSQL refuses in text) or a lone surrogate (not UTF-8) in an
    error: the try fails at once with the error shown cleaned, no retry spent."""
    harness.write("unstorable", UNSTORABLE)
    harness.trigger("unstorable")
    assert harness.run("nul") is Outcome.FAILED
    assert harness.run("surrogate") is Outcome.FAILED
    assert harness.run("fine") is Outcome.SUCCESS
    found = errors(harness)
    assert found["nul"] == ("failed", "ValueError: a\ufffdb")
    assert found["surrogate"] == ("failed", "ValueError: x?y")
    assert found["fine"] == ("success", None)


MATCH = """
from pathlib import Path
from sluice import DAG, task

def write(name):
    def run():
        Path({folder!r}, name).write_text("ran")
        return name
    return run

with DAG("messages", schedule=None) as dag:
    task(task_id="asked")(write("asked"))
    task(task_id="other")(write("other"))
"""


def test_a_message_naming_another_task_runs_nothing(harness: Harness, tmp_path: Path) -> None:
    """A message with a TI's id and live attempt id but another task id is stale: it
    claims nothing and runs no code; the TI's own message then runs its own task."""
    harness.write("messages", MATCH.format(folder=str(tmp_path)))
    harness.trigger("messages")
    real = next(m for m in harness.by_scheduler if m.task_id == "asked")
    forged = dataclasses.replace(real, task_id="other")
    assert harness.run_message(forged) is Outcome.STALE
    assert harness.states()["asked"] == "queued" and not (tmp_path / "other").exists()
    assert harness.run_message(real) is Outcome.SUCCESS
    assert (tmp_path / "asked").read_text() == "ran" and not (tmp_path / "other").exists()


CONF_DAG = """
from sluice import DAG, task

def reads(context):
    return sorted(context["conf"])

with DAG("confs", schedule=None) as dag:
    task(task_id="quiet")(lambda: 1) >> task(task_id="reads")(reads)
"""


def test_a_big_conf_travels_only_to_the_tasks_that_read_it(harness: Harness) -> None:
    """The claim returns no conf (a run's conf went back with every claim of every task);
    a task that takes the context still gets it, read for it alone."""
    from sqlalchemy import update

    from sluice.broker.worker.runner import claim_statement
    from sluice.scheduler.core.db import executed_alone, transaction, utcnow
    from sluice.scheduler.core.models import DagRun

    harness.write("confs", CONF_DAG)
    run_pk = harness.trigger("confs")
    with transaction(harness.factory) as session:
        conf = {"big": "x" * 60_000, "small": 1}
        session.execute(update(DagRun).where(DagRun.id == run_pk).values(conf=conf))
    quiet = next(m for m in harness.by_scheduler if m.task_id == "quiet")
    claimed = executed_alone(harness.factory, claim_statement(quiet, "h", 1, utcnow()))
    assert len(claimed) == 1 and "conf" not in claimed[0]._fields
    with transaction(harness.factory) as session:  # back to queued: the real run below
        session.execute(
            update(TaskInstance)
            .where(TaskInstance.id == quiet.ti_id)
            .values(state="queued", hostname=None, pid=None, start_date=None)
        )
    assert harness.run("quiet") is Outcome.SUCCESS
    assert harness.run("reads") is Outcome.SUCCESS
    with harness.factory() as session:
        result = session.scalar(select(TaskInstance.result).where(TaskInstance.task_id == "reads"))
    assert result == '["big","small"]'
