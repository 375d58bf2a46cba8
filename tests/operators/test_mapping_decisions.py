"""A scheduler's decisions about mapped tasks on PostgreSQL, in-process (`update_state`
with the run's row locked, as a pass makes them): expansion once, one-to-one indexes in
the same transaction, a rerun with fewer items, `max_active_tis_per_dagrun`, the inputs a
scheduler refuses, and the metrics of a tick that expands."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from sluice.broker.wakeup import LocalWaker
from sluice.scheduler.core.models import Dag, DagRun, TaskInstance
from sluice.scheduler.core.states import TI, DagRunState
from sluice.scheduler.core.transitions import move_run
from sluice.scheduler.jobs.metrics import SchedulerMetrics
from sluice.scheduler.jobs.scheduler_job import SchedulerJob
from sluice.scheduler.scheduling.clearing import clear_task_instances
from tests.operators.helpers import World
from tests.operators.test_metrics import one, scrape

MAPPED = """
with DAG("m", schedule=None) as dag:
    @task
    def items():
        return []

    @task
    def first(x):
        return x

    @task
    def second(y):
        return y

    @task(max_active_tis_per_dagrun=2)
    def limited(z):
        return z

    @task
    def total(values):
        return values

    found = items()
    total(second.expand(y=first.expand(x=found)))
    limited.expand(z=found)
"""


@pytest.fixture
def world(pg_url: str, tmp_path: Path) -> Iterator[World]:
    folder = tmp_path / "dags"
    folder.mkdir()
    w = World(pg_url, folder, heartbeat_timeout=30, queued_timeout=60, max_map_length=500)
    w.dags(MAPPED)
    yield w
    w.close()


def states(world: World, run_id: str) -> dict[str, list[tuple[int, str]]]:
    with world.factory() as session:
        found: dict[str, list[tuple[int, str]]] = {}
        for ti in session.scalars(
            select(TaskInstance)
            .where(TaskInstance.run_id == run_id)
            .order_by(TaskInstance.task_id, TaskInstance.map_index)
        ):
            found.setdefault(ti.task_id, []).append((ti.map_index, str(ti.state)))
        return found


def items_done(world: World, run_id: str, value: object) -> None:
    world.advance("m", run_id, "items", TI.SUCCESS, result=json.dumps(value))


def test_expansion_writes_the_indexes_once_and_the_one_to_one_task_follows(
    world: World,
) -> None:
    world.trigger("m", "r1")
    world.decide("m", "r1")
    assert states(world, "r1")["first"] == [(-1, "none")]
    items_done(world, "r1", [10, 20, 30, 40])
    decision = world.decide("m", "r1")
    found = states(world, "r1")
    assert found["first"] == [(i, "scheduled") for i in range(4)]
    # the task mapped one to one over `first` has its indexes in the same transaction
    assert found["second"] == [(i, "none") for i in range(4)]
    # at most two of `limited` scheduled at once
    assert found["limited"] == [(0, "scheduled"), (1, "scheduled"), (2, "none"), (3, "none")]
    assert found["total"] == [(-1, "none")]
    assert (decision.expansions, decision.indexes) == (3, 12)
    # deciding again expands nothing more
    again = world.decide("m", "r1")
    assert again.expansions == 0
    assert states(world, "r1")["first"] == found["first"]
    # index 1 of `first` done: index 1 of `second` is ready, the others wait
    world.advance("m", "r1", "first", TI.SUCCESS, map_index=1, result="20")
    world.decide("m", "r1")
    assert states(world, "r1")["second"][1] == (1, "scheduled")
    assert {s for i, s in states(world, "r1")["second"] if i != 1} == {"none"}
    # a slot of `limited` frees: the next index is scheduled
    world.advance("m", "r1", "limited", TI.SUCCESS, map_index=0, result="10")
    world.decide("m", "r1")
    assert states(world, "r1")["limited"][2] == (2, "scheduled")
    assert states(world, "r1")["limited"][3] == (3, "none")


def test_a_rerun_with_fewer_items_removes_the_extra_indexes(world: World) -> None:
    world.trigger("m", "r1")
    items_done(world, "r1", [1, 2, 3, 4])
    world.decide("m", "r1")
    for i in range(4):
        world.advance("m", "r1", "first", TI.SUCCESS, map_index=i, result=str(i))
    # `items` now finds two: cleared with its downstream, it runs again
    with world.factory() as session, session.begin():
        run = session.scalar(select(DagRun).where(DagRun.run_id == "r1"))
        dag = session.get(Dag, "m")
        assert run is not None and dag is not None
        clear_task_instances(session, run, dag, ["items"], downstream=True, now=world.now)
        move_run(session, run.id, DagRunState.RUNNING, expect=[DagRunState.QUEUED], now=world.now)
    items_done(world, "r1", [1, 2])
    world.decide("m", "r1")
    found = states(world, "r1")
    assert found["first"] == [(0, "scheduled"), (1, "scheduled"), (2, "removed"), (3, "removed")]
    assert found["second"] == [(0, "none"), (1, "none"), (2, "removed"), (3, "removed")]


@pytest.mark.parametrize(
    ("value", "first", "error"),
    [
        ([], "skipped", None),
        (None, "skipped", None),
        ("abc", "failed", "is a str: a mapped task expands over a list or a dict"),
        (list(range(501)), "failed", "gives 501 items, more than max_map_length 500"),
    ],
    ids=["zero-items", "no-result", "not-a-list", "over-the-cap"],
)
def test_what_a_scheduler_refuses_to_expand(
    world: World, value: object, first: str, error: str | None
) -> None:
    """An input a worker did not check (a marked success, an older DAG version) is decided
    by the scheduler: zero items skip, the rest fail the mapped task with one line, and no
    index is created."""
    world.trigger("m", "r1")
    items_done(world, "r1", value)
    world.decide("m", "r1")
    found = states(world, "r1")
    assert found["first"] == [(-1, first)]
    assert found["second"][0][1] in ("skipped", "upstream_failed")
    ti = world.ti("m", "r1", "first")
    if error is None:
        assert ti.error is None
    else:
        assert ti.error is not None and error in ti.error


def test_a_tick_that_expands_counts_it(world: World) -> None:
    world.trigger("m", "r1")
    items_done(world, "r1", [1, 2, 3])
    job = SchedulerJob(world.settings, world.factory, lambda _: None, LocalWaker())
    job.register()
    metrics = SchedulerMetrics(world.settings, world.factory, 0, host="127.0.0.1", env={})
    try:
        started = time.perf_counter()
        result = job.tick(world.now)
        metrics.record_tick(result, time.perf_counter() - started)
        assert metrics.port
        samples = scrape(metrics.port)
    finally:
        metrics.shutdown()
    assert (result.mapped_expansions, result.tis_expanded) == (3, 9)
    assert one(samples, "sluice_scheduler_mapped_expansions_total") == 3
    assert one(samples, "sluice_scheduler_tis_expanded_total") == 9


def test_explain_names_the_index_and_what_it_waits_for(world: World) -> None:
    world.trigger("m", "r1")
    items_done(world, "r1", [1, 2, 3])
    world.decide("m", "r1")
    world.advance("m", "r1", "first", TI.SUCCESS, map_index=0, result="1")
    waiting = world.explain("m", "r1", "second", map_index=2)
    assert (waiting.map_index, waiting.state) == (2, "none")
    assert "waiting on upstream 'first' (scheduled)" in waiting.summary
    assert "of 1" in waiting.summary  # its one upstream TI: index 2 of `first`
    reduce = world.explain("m", "r1", "total")
    assert "'second' (3 none)" in reduce.summary
    from sluice.scheduler.control.explain import ExplainError

    with pytest.raises(ExplainError, match="mapped: name one of its indexes 0..2"):
        world.explain("m", "r1", "second")


WIDE = 192
"""Indexes of the wide expansion below."""


def test_a_wide_expansion_is_one_insert_with_every_column(world: World) -> None:
    """A wide expansion is one INSERT (on PostgreSQL, one SELECT over a JSON array of the
    rows): each row with the task's options and a span of its own in the run's trace, the
    ones to start already scheduled."""
    world.trigger("m", "r1")
    items_done(world, "r1", list(range(WIDE)))
    world.decide("m", "r1")
    with world.factory() as session:
        tis = session.scalars(
            select(TaskInstance)
            .where(TaskInstance.run_id == "r1", TaskInstance.task_id.in_(["first", "limited"]))
            .order_by(TaskInstance.task_id, TaskInstance.map_index)
        ).all()
    first = [t for t in tis if t.task_id == "first"]
    limited = [t for t in tis if t.task_id == "limited"]
    assert [t.map_index for t in first] == list(range(WIDE))
    assert {t.state for t in first} == {TI.SCHEDULED}
    assert all(t.scheduled_at is not None for t in first)
    assert [t.state for t in limited[:3]] == [TI.SCHEDULED, TI.SCHEDULED, TI.NONE]
    assert all(t.scheduled_at is None for t in limited[2:])
    for t in tis:
        assert (t.queue, t.pool, t.pool_slots, t.max_tries, t.try_number) == (
            "default",
            "default_pool",
            1,
            1,
            0,
        )
        assert t.span_status == "not_started" and t.callback_mask == 0
    parents = [t.context_carrier["traceparent"].split("-") for t in tis]
    assert len({p[1] for p in parents}) == 1  # the run's trace
    assert len({p[2] for p in parents}) == len(tis)  # a span id each
