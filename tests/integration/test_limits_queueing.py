"""The schedulers' queueing of TIs waiting for a limit, one pass at a time against real
PostgreSQL (no worker): a full key does not starve another key, a bucket hands out its
tokens and no more, and the pass that takes them writes them."""

from __future__ import annotations

from sqlalchemy import select, update

from sluice.scheduler.core.db import transaction, utcnow
from sluice.scheduler.core.models import RateLimit, TaskInstance
from sluice.scheduler.core.states import TI
from sluice.scheduler.decide.downstream_sql import UNCLAIMED
from sluice.scheduler.decide.queueing import queue_scheduled
from tests.integration.test_scheduling_limits import Harness, harness, write

__all__ = ["harness"]

KEYED = """
import sluice
from sluice import DAG, task
ONE = sluice.Concurrency("per_customer", key=lambda ctx: "unused", limit=1)
with DAG("keyed", schedule=None):
    for i in range(8):
        task(task_id=f"t{i}", concurrency=ONE, priority_weight=10 - i)(lambda: None)
"""

RATED = """
from datetime import timedelta
import sluice
from sluice import DAG, task
THREE = sluice.RateLimit("three_a_minute", 3, per=timedelta(minutes=1))
with DAG("rated", schedule=None):
    for i in range(5):
        task(task_id=f"t{i}", rate_limit=THREE)(lambda: None)
"""


def _ti_states(h: Harness) -> dict[str, tuple[str, str | None]]:
    with h.factory() as session:
        rows = session.execute(
            select(TaskInstance.task_id, TaskInstance.state, TaskInstance.concurrency_key)
        ).all()
    return {t: (str(s), k) for t, s, k in rows}


def test_a_full_key_does_not_starve_another_key(harness: Harness) -> None:
    write(harness.job.settings.dags_folder, "keyed", KEYED)
    harness.job.tick(utcnow())
    harness.trigger("keyed")
    harness.job.tick(utcnow())
    assert {s for s, _ in _ti_states(harness).values()} == {"queued"}  # keys not known yet
    # as workers would leave them: t0 runs holding customer a's one slot; t1..t6 (a) and
    # t7 (b) were given back, waiting with their keys; a's come first by priority
    with transaction(harness.factory) as session:
        ti = TaskInstance
        session.execute(
            update(ti).where(ti.task_id == "t0").values(state=TI.RUNNING, concurrency_key="a")
        )
        session.execute(
            update(ti)
            .where(ti.task_id != "t0")
            .values(state=TI.SCHEDULED, concurrency_key="a", try_number=0)
        )
        session.execute(update(ti).where(ti.task_id == "t7").values(concurrency_key="b"))
    # a batch of 3 candidates: a's six waiting TIs would fill it; b's must still go
    with transaction(harness.factory) as session:
        messages, left = queue_scheduled(
            session, job_id=None, now=utcnow(), runs=UNCLAIMED, limit=3, limited=True
        )
    assert [m.task_id for m in messages] == ["t7"]
    states = _ti_states(harness)
    assert states["t7"] == ("queued", "b")
    assert [t for t, (s, _) in states.items() if s == "scheduled"] == [f"t{i}" for i in range(1, 7)]
    # a worker's fill never takes them: only a scheduler's pass with `limited`
    with transaction(harness.factory) as session:
        messages, _ = queue_scheduled(session, job_id=None, now=utcnow(), runs=UNCLAIMED)
    assert messages == []
    # a's slot frees: exactly one of a's waiting TIs goes, the first by priority
    with transaction(harness.factory) as session:
        session.execute(
            update(TaskInstance).where(TaskInstance.task_id == "t0").values(state=TI.SUCCESS)
        )
    with transaction(harness.factory) as session:
        messages, left = queue_scheduled(
            session, job_id=None, now=utcnow(), runs=UNCLAIMED, limited=True
        )
    assert [m.task_id for m in messages] == ["t1"]
    assert left  # five still wait for a


def test_a_bucket_hands_out_its_tokens_and_no_more(harness: Harness) -> None:
    write(harness.job.settings.dags_folder, "rated", RATED)
    harness.job.tick(utcnow())
    with harness.factory() as session:
        bucket = session.get(RateLimit, "three_a_minute")
        assert bucket is not None and (bucket.amount, bucket.per_seconds) == (3, 60.0)
    harness.trigger("rated")
    harness.job.tick(utcnow())
    harness.job.tick(utcnow())
    states = [s for s, _ in _ti_states(harness).values()]
    assert sorted(states) == ["queued"] * 3 + ["scheduled"] * 2
    assert len(harness.sent) == 3
    with harness.factory() as session:
        bucket = session.get(RateLimit, "three_a_minute")
        assert bucket is not None and bucket.tokens < 1
    # two schedulers' passes later, still no token: nothing more goes
    harness.job.tick(utcnow())
    assert len(harness.sent) == 3
