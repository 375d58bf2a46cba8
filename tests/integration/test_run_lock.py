"""A run's row lock never makes a write of its TIs wait (real PostgreSQL).

PostgreSQL checks a task instance's foreign key to its run again when a transaction
writes a TI row it already wrote (queueing a TI, then starting its span), taking the
run's row `FOR KEY SHARE`. The run locks (a scheduler's claim, a worker's result
transaction) must not conflict with that check: the writer holds a pool's lock by then,
and the run's lock holder may be waiting for that pool (a deadlock, seen with tracing on).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from sqlalchemy import select, text, update
from sqlalchemy.orm import Session

from sluice.scheduler.core.db import executed, transaction
from sluice.scheduler.core.models import TaskInstance
from sluice.scheduler.core.queries.runs import claim_runs_to_examine
from sluice.scheduler.decide.downstream_sql import UNCLAIMED, run_lock
from tests.integration import test_worker_downstream
from tests.integration.test_worker_downstream import Harness

harness = test_worker_downstream.harness  # the fixture: one scheduler job and a worker context

ONE_TASK = """
from sluice import DAG, task
with DAG("one", schedule=None) as dag:
    task(task_id="only")(lambda: 1)
"""


def worker_lock(session: Session, run_pk: int) -> None:
    assert executed(session, run_lock(run_pk))


def scheduler_claim(session: Session, run_pk: int) -> None:
    assert [r.id for r in claim_runs_to_examine(session, UNCLAIMED, 10)] == [run_pk]


@pytest.mark.parametrize("lock", [worker_lock, scheduler_claim], ids=["worker", "scheduler"])
def test_a_locked_run_lets_its_tis_be_written_twice(
    harness: Harness, lock: Callable[[Session, int], None]
) -> None:
    # Given a run whose row one transaction holds locked, as a result or a pass does
    harness.write("one", ONE_TASK)
    run_pk = harness.trigger("one")
    with transaction(harness.factory) as holder:
        lock(holder, run_pk)
        # When another transaction writes one of its TIs twice (queueing, span start)
        with transaction(harness.factory) as writer:
            writer.execute(text("SET LOCAL lock_timeout = '2s'"))
            ti_id = writer.scalars(
                select(TaskInstance.id).where(TaskInstance.dag_run_id == run_pk)
            ).one()
            for weight in (5, 6):
                writer.execute(
                    update(TaskInstance)
                    .where(TaskInstance.id == ti_id)
                    .values(priority_weight=weight)
                    .execution_options(synchronize_session=False)
                )
    # Then neither write waited for the run's lock (a wait would fail on lock_timeout)
    with transaction(harness.factory) as session:
        assert session.get(TaskInstance, ti_id).priority_weight == 6  # type: ignore[union-attr]
