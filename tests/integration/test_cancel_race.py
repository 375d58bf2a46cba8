"""Cancelling a run a scheduler started after the canceller loaded it (real PostgreSQL):
the cancel decides on the state it locked, not on the one it loaded."""

from __future__ import annotations

from sqlalchemy import select, update

from sluice.scheduler.control import operations
from sluice.scheduler.core.db import transaction, utcnow
from sluice.scheduler.core.models import DagRun
from sluice.scheduler.core.states import DagRunState
from tests.integration.test_scheduling_limits import Harness, harness, write

__all__ = ["harness"]

DAG = """
from sluice import DAG, task
with DAG("to_cancel", schedule=None):
    task(task_id="t")(lambda: None)
"""


def test_a_run_started_after_it_was_loaded_is_cancelled(harness: Harness) -> None:
    write(harness.job.settings.dags_folder, "to_cancel", DAG)
    harness.job.tick(utcnow())
    harness.trigger("to_cancel")
    with transaction(harness.factory) as session:
        run = session.scalars(select(DagRun)).one()  # loaded queued, as the API finds it
        assert run.state == DagRunState.QUEUED
        with transaction(harness.factory) as scheduler:  # a scheduler starts it meanwhile
            scheduler.execute(update(DagRun).values(state=DagRunState.RUNNING))
        done = operations.cancel_run(session, run, who="test", now=utcnow())
        assert done.runs == 1
    with harness.factory() as session:
        assert session.scalars(select(DagRun.state)).one() == DagRunState.FAILED
