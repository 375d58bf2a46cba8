"""A worker decides and queues the direct downstream of what it finished (the "mini
scheduler", `scheduler.decide.downstream`), against real PostgreSQL.

The scheduler's `tick(now)` and the worker's `run_task_instance` are called in this
process; both `publish` callables record the messages they would send, so each test
sees who queued what. The last test runs the whole path with a real `sluice worker`.
"""

from __future__ import annotations

import datetime as dt
import os
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import func, select, update
from sqlalchemy.exc import OperationalError

from sluice.broker.wakeup import LocalWaker
from sluice.broker.worker.result import Case, Recorded, at_once, decision, record_result
from sluice.broker.worker.runner import Outcome, WorkerContext, run_task_instance
from sluice.scheduler.core.db import make_engine, make_session_factory, transaction, utcnow
from sluice.scheduler.core.messages import RunMessage
from sluice.scheduler.core.models import Dag, DagRun, Pool, TaskInstance, TaskLog
from sluice.scheduler.core.settings import Settings
from sluice.scheduler.core.states import TI, RunType
from sluice.scheduler.jobs.scheduler_job import SchedulerJob
from sluice.scheduler.scheduling.dagrun import create_dagrun
from sluice.tasks.loader import DagCache
from tests.procs import Sluice, wait_until


class Harness:
    """One scheduler job and one worker context on the same database and waker."""

    def __init__(self, url: str, folder: Path, **settings: object) -> None:
        self.engine = make_engine(url)
        self.factory = make_session_factory(self.engine)
        self.settings = Settings(
            database_url=url, dags_folder=folder, dag_refresh_interval=0.001
        ).with_(**settings)
        self.waker = LocalWaker()
        self.by_scheduler: list[RunMessage] = []
        self.by_worker: list[RunMessage] = []
        self.job = SchedulerJob(self.settings, self.factory, self.by_scheduler.extend, self.waker)
        self.job.register()
        self.recorded: list[Recorded] = []
        self.worker = WorkerContext(
            session_factory=self.factory,
            dags=DagCache(),
            waker=self.waker,
            settings=self.settings,
            hostname="test-host",
            pid=os.getpid(),
            publish=self.by_worker.extend,
            observe=self.recorded.append,
        )

    def add_pool(self, name: str, slots: int) -> None:
        with transaction(self.factory) as session:
            session.add(Pool(name=name, slots=slots))

    def write(self, name: str, body: str) -> None:
        (self.settings.dags_folder / f"{name}.py").write_text(textwrap.dedent(body))

    def trigger(self, dag_id: str) -> int:
        """A manual run, started and its roots queued by one scheduler tick; the run's pk."""
        self.job.tick(utcnow())  # parse the folder
        with transaction(self.factory) as session:
            dag = session.get(Dag, dag_id)
            assert dag is not None
            now = utcnow()
            run = create_dagrun(session, dag, run_type=RunType.MANUAL, logical_date=now, now=now)
            run_pk = run.id
        self.waker.wake()
        self.job.tick(utcnow())
        self.waker.take_news()  # what the scheduler's tick left unread
        return run_pk

    def run(self, task_id: str) -> Outcome:
        """Run the queued message of `task_id` (whoever sent it) on the worker."""
        sent = [m for m in self.by_scheduler + self.by_worker if m.task_id == task_id]
        assert sent, f"{task_id} was never queued"
        return run_task_instance(self.worker, sent[-1])

    def run_message(self, msg: RunMessage) -> Outcome:
        """Run `msg` as it is on the worker."""
        return run_task_instance(self.worker, msg)

    def path(self) -> str:
        """The path (and the step after it) that recorded the last result."""
        last = self.recorded[-1]
        return f"{last.path}, then {last.then}" if last.then else last.path

    def news(self) -> set[int] | None:
        """The run ids the schedulers were woken for (left for the next tick to read)."""
        taken = self.waker.take_news()
        for run_pk in taken or ():
            self.waker.wake(run_pk)
        return taken

    def worker_queued(self) -> list[str]:
        return [m.task_id for m in self.by_worker]

    def states(self) -> dict[str, str]:
        with self.factory() as session:
            rows = session.execute(select(TaskInstance.task_id, TaskInstance.state)).all()
        return {t: s for t, s in rows}

    def run_state(self, run_pk: int) -> str:
        with self.factory() as session:
            return str(session.scalar(select(DagRun.state).where(DagRun.id == run_pk)))


@pytest.fixture
def harness(pg_url: str, tmp_path: Path) -> Iterator[Harness]:
    folder = tmp_path / "dags"
    folder.mkdir()
    h = Harness(pg_url, folder)
    yield h
    h.engine.dispose()


CHAIN = """
from sluice import DAG, task
with DAG("chain", schedule=None) as dag:
    a = task(task_id="a")(lambda: 1)
    b = task(task_id="b")(lambda: 2)
    c = task(task_id="c")(lambda: 3)
    a >> b >> c
"""


def test_worker_queues_the_next_task_without_waking_the_scheduler(harness: Harness) -> None:
    harness.write("chain", CHAIN)
    run_pk = harness.trigger("chain")
    assert [m.task_id for m in harness.by_scheduler] == ["a"]

    assert harness.run("a") is Outcome.SUCCESS
    assert harness.worker_queued() == ["b"]
    assert harness.states() == {"a": "success", "b": "queued", "c": "none"}
    assert harness.news() == set()  # nothing for the scheduler to do
    with harness.factory() as session:
        b = session.scalars(select(TaskInstance).where(TaskInstance.task_id == "b")).one()
    assert (b.try_number, b.queued_by_job_id, b.attempt_id) == (
        1,
        None,
        harness.by_worker[0].attempt_id,
    )

    assert harness.run("b") is Outcome.SUCCESS
    assert harness.run("c") is Outcome.SUCCESS
    assert harness.worker_queued() == ["b", "c"]
    # The last task leaves the run to the scheduler, which ends it.
    assert harness.news() == {run_pk}
    assert harness.run_state(run_pk) == "running"
    harness.job.tick(utcnow())
    assert harness.run_state(run_pk) == "success"


def test_a_join_is_queued_by_the_worker_that_finishes_its_last_upstream(harness: Harness) -> None:
    harness.write(
        "join",
        """
    from sluice import DAG, task
    with DAG("join", schedule=None) as dag:
        left = task(task_id="left")(lambda: 1)
        right = task(task_id="right")(lambda: 2)
        join = task(task_id="join")(lambda: 3)
        [left, right] >> join
    """,
    )
    harness.trigger("join")
    harness.run("left")
    assert harness.worker_queued() == []
    assert harness.states()["join"] == "none"
    harness.run("right")
    assert harness.worker_queued() == ["join"]


def test_worker_respects_pool_slots_and_fills_the_slot_it_frees(harness: Harness) -> None:
    harness.add_pool("small", 2)
    harness.write(
        "pooled",
        """
    from sluice import DAG, task
    with DAG("pooled", schedule=None) as dag:
        root = task(task_id="root")(lambda: 0)
        for i in range(4):
            root >> task(task_id=f"p{i}", pool="small", priority_weight=10 - i)(lambda: i)
    """,
    )
    run_pk = harness.trigger("pooled")
    harness.run("root")
    assert harness.worker_queued() == ["p0", "p1"]  # by priority, as many as fit
    assert harness.states()["p2"] == harness.states()["p3"] == "scheduled"
    assert harness.news() == {run_pk}  # left waiting: a scheduler pass may place them
    harness.job.tick(utcnow())
    assert [m.task_id for m in harness.by_scheduler] == ["root"]  # the pool is full
    harness.run("p1")  # frees a slot: after its commit, the first in line gets it
    assert harness.worker_queued() == ["p0", "p1", "p2"]
    assert harness.news() == set()
    with harness.factory() as session:
        used = session.scalar(
            select(func.sum(TaskInstance.pool_slots)).where(
                TaskInstance.pool == "small", TaskInstance.state.in_(["queued", "running"])
            )
        )
    assert used == 2


def test_a_wide_join_waits_for_its_last_upstream_while_results_fill_the_pool(
    harness: Harness,
) -> None:
    """A join of 20 upstreams in a 2-slot pool: each upstream's result leaves the join
    alone (others unfinished) and gives its slot to the next in line; only the last one
    queues the join, and no result needs a scheduler."""
    harness.add_pool("small", 2)
    harness.write(
        "wide_join",
        """
    from sluice import DAG, task
    with DAG("wide_join", schedule=None) as dag:
        root = task(task_id="root")(lambda: 0)
        join = task(task_id="join")(lambda: 1)
        for i in range(20):
            mid = task(task_id=f"m{i:02}", pool="small", priority_weight=100 - i)(lambda: i)
            root >> mid >> join
    """,
    )
    harness.trigger("wide_join")
    harness.run("root")
    harness.waker.take_news()  # the 18 left waiting in the pool
    assert harness.worker_queued() == ["m00", "m01"]
    for i in range(20):
        assert harness.run(f"m{i:02}") is Outcome.SUCCESS
        assert harness.news() == set()
        expect = "queued" if i == 19 else "none"
        assert harness.states()["join"] == expect, f"after m{i:02}"
    assert harness.worker_queued() == [f"m{i:02}" for i in range(20)] + ["join"]


def test_a_one_success_join_is_queued_by_its_first_upstream(harness: Harness) -> None:
    harness.write(
        "first",
        """
    from sluice import DAG, task
    with DAG("first", schedule=None) as dag:
        ups = [task(task_id=f"u{i}")(lambda: i) for i in range(3)]
        ups >> task(task_id="j", trigger_rule="one_success")(lambda: 1)
    """,
    )
    harness.trigger("first")
    harness.run("u1")
    assert harness.worker_queued() == ["j"]
    assert harness.states() == {"u0": "queued", "u1": "success", "u2": "queued", "j": "queued"}


def test_a_chain_s_next_task_waits_when_its_pool_is_full(harness: Harness) -> None:
    """The next task of a chain is queued only if its pool has room; otherwise it waits in
    `scheduled` and the result that frees the slot queues it."""
    harness.add_pool("one", 1)
    harness.write(
        "tight",
        """
    from sluice import DAG, task
    with DAG("tight", schedule=None) as dag:
        blocker = task(task_id="blocker", pool="one")(lambda: 0)
        a = task(task_id="a")(lambda: 1)
        a >> task(task_id="b", pool="one")(lambda: 2)
    """,
    )
    run_pk = harness.trigger("tight")
    assert sorted(m.task_id for m in harness.by_scheduler) == ["a", "blocker"]
    harness.run("a")
    assert harness.states()["b"] == "scheduled"
    assert harness.worker_queued() == []
    assert harness.news() == {run_pk}
    harness.waker.take_news()
    harness.run("blocker")
    assert harness.worker_queued() == ["b"]
    assert harness.states()["b"] == "queued"


def run_while_a_rival_holds_the_pool(
    harness: Harness, task_id: str, pool: str, rival: str
) -> float:
    """Run `task_id` while another transaction holds `pool`'s row; that rival queuer
    queues TI `rival` and commits 0.3 s later. How long the run took (≥ 0.25 s if it
    waited for the pool's row)."""
    held, release = threading.Event(), threading.Event()

    def rival_queuer() -> None:
        with transaction(harness.factory) as session:
            session.execute(select(Pool.name).where(Pool.name == pool).with_for_update())
            held.set()
            release.wait(10)
            session.execute(
                update(TaskInstance).where(TaskInstance.task_id == rival).values(state="queued")
            )

    holder = threading.Thread(target=rival_queuer)
    holder.start()
    held.wait(10)
    threading.Timer(0.3, release.set).start()
    started = time.monotonic()
    assert harness.run(task_id) is Outcome.SUCCESS
    took = time.monotonic() - started
    holder.join()
    return took


def test_a_chain_result_counts_its_pool_after_the_lock_holder_committed(
    harness: Harness,
) -> None:
    """The result's read waits for the pool's row (held by another queuer); the room is
    counted after that holder's commit, so what it queued meanwhile is seen: the freed
    slot went to the holder's TI, and the chain's next task waits."""
    harness.add_pool("one", 1)
    harness.write(
        "pair",
        """
    from sluice import DAG, task
    with DAG("pair", schedule=None) as dag:
        task(task_id="a", pool="one")(lambda: 1) >> task(task_id="b", pool="one")(lambda: 2)
    with DAG("rival", schedule=None) as rival:
        task(task_id="r0")(lambda: 3) >> task(task_id="r", pool="one")(lambda: 4)
    """,
    )
    harness.trigger("pair")
    harness.trigger("rival")
    assert sorted(m.task_id for m in harness.by_scheduler) == ["a", "r0"]
    assert run_while_a_rival_holds_the_pool(harness, "a", "one", rival="r") >= 0.25
    assert harness.worker_queued() == []
    assert harness.states() == {"a": "success", "b": "scheduled", "r0": "queued", "r": "queued"}


def test_a_freed_slot_is_filled_after_the_pool_s_lock_holder_committed(
    harness: Harness,
) -> None:
    """A fan-in result frees a slot TIs wait for: its own UPDATE waits for the pool's row
    (held by another queuer), and the fill counts the room after that holder's commit."""
    harness.add_pool("one", 1)
    harness.write(
        "fan",
        """
    from sluice import DAG, task
    with DAG("fan", schedule=None) as dag:
        join = task(task_id="j")(lambda: 0)
        task(task_id="a", pool="one")(lambda: 1) >> join
        task(task_id="b")(lambda: 2) >> join
    with DAG("rival", schedule=None) as rival:
        task(task_id="r1", pool="one")(lambda: 3)
        task(task_id="r2", pool="one")(lambda: 4)
    """,
    )
    harness.trigger("fan")
    harness.trigger("rival")
    assert sorted(m.task_id for m in harness.by_scheduler) == ["a", "b"]  # r1, r2 wait
    assert run_while_a_rival_holds_the_pool(harness, "a", "one", rival="r1") >= 0.25
    assert harness.worker_queued() == []  # the slot went to the holder's r1
    states = harness.states()
    assert (states["a"], states["r1"], states["r2"], states["j"]) == (
        "success",
        "queued",
        "scheduled",
        "none",
    )


def test_a_freed_slot_s_message_carries_the_waiting_ti_s_span(harness: Harness) -> None:
    """With tracing, the TI queued into a freed slot is sent with its span carrier (the
    worker's span nests under it), as a scheduler's queueing sends it."""
    from sluice.scheduler.decide.downstream import fill_freed_slot

    harness.add_pool("one", 1)
    harness.write(
        "traced_pool",
        """
    from sluice import DAG, task
    with DAG("traced_pool", schedule=None) as dag:
        task(task_id="p0", pool="one", priority_weight=2)(lambda: 0)
        task(task_id="p1", pool="one", priority_weight=1)(lambda: 1)
    """,
    )
    harness.trigger("traced_pool")
    assert harness.states() == {"p0": "queued", "p1": "scheduled"}
    carrier = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    with transaction(harness.factory) as session:  # p0 finished, p1 waits with its span
        session.execute(
            update(TaskInstance).where(TaskInstance.task_id == "p0").values(state="success")
        )
        session.execute(
            update(TaskInstance).where(TaskInstance.task_id == "p1").values(context_carrier=carrier)
        )
    with transaction(harness.factory) as session:
        traced = fill_freed_slot(session, pool="one", now=utcnow(), with_trace=True)
    assert [(m.task_id, m.trace) for m in traced] == [("p1", carrier)]


def test_worker_respects_max_active_tasks(harness: Harness) -> None:
    harness.write(
        "narrow",
        """
    from sluice import DAG, task
    with DAG("narrow", schedule=None, max_active_tasks=2) as dag:
        root = task(task_id="root")(lambda: 0)
        for i in range(3):
            root >> task(task_id=f"n{i}")(lambda: i)
    """,
    )
    harness.trigger("narrow")
    harness.run("root")
    assert len(harness.worker_queued()) == 2
    assert sorted(harness.states().values()).count("scheduled") == 1
    harness.run(harness.worker_queued()[0])  # a slot of the DAG frees: the waiting one goes
    assert len(harness.worker_queued()) == 3


def test_a_worker_waits_for_a_run_held_by_a_scheduler_then_decides(harness: Harness) -> None:
    harness.write("chain", CHAIN)
    run_pk = harness.trigger("chain")
    held, release = threading.Event(), threading.Event()

    def scheduler_pass() -> None:
        with transaction(harness.factory) as session:
            session.execute(select(DagRun.id).where(DagRun.id == run_pk).with_for_update())
            held.set()
            release.wait(10)

    holder = threading.Thread(target=scheduler_pass)
    holder.start()
    held.wait(10)
    threading.Timer(0.3, release.set).start()
    started = time.monotonic()
    assert harness.run("a") is Outcome.SUCCESS
    assert time.monotonic() - started >= 0.25  # it waited for the holder's commit
    holder.join()
    assert harness.worker_queued() == ["b"]
    assert harness.news() == set()


def test_backfill_runs_and_cascades_are_left_to_their_job(harness: Harness) -> None:
    harness.write(
        "branchy",
        """
    from sluice import DAG, task
    with DAG("branchy", schedule=None) as dag:
        pick = task.branch(task_id="pick")(lambda: "yes")
        yes = task(task_id="yes")(lambda: 1)
        no = task(task_id="no")(lambda: 2)
        after_no = task(task_id="after_no")(lambda: 3)
        pick >> [yes, no]
        no >> after_no
    """,
    )
    run_pk = harness.trigger("branchy")
    harness.run("pick")
    assert harness.worker_queued() == ["yes"]
    assert harness.states()["no"] == "skipped"
    assert harness.news() == {run_pk}  # "no" was skipped: the scheduler cascades
    harness.job.tick(utcnow())
    assert harness.states()["after_no"] == "skipped"

    harness.write("chain", CHAIN)
    chain_pk = harness.trigger("chain")
    with transaction(harness.factory) as session:
        session.execute(
            update(DagRun).where(DagRun.id == chain_pk).values(claimed_by_job_id=harness.job.job_id)
        )
    harness.run("a")
    assert harness.worker_queued() == ["yes"]
    assert harness.states()["b"] == "none"
    assert harness.news() == {chain_pk}


def test_the_setting_turns_it_off(pg_url: str, tmp_path: Path) -> None:
    folder = tmp_path / "dags"
    folder.mkdir()
    h = Harness(pg_url, folder, schedule_after_task=False)
    try:
        h.write("chain", CHAIN)
        run_pk = h.trigger("chain")
        h.run("a")
        assert h.worker_queued() == []
        assert h.states()["b"] == "none"
        assert h.news() == {run_pk}
    finally:
        h.engine.dispose()


def test_a_real_worker_carries_a_chain_with_no_scheduler_running(sluice: Sluice) -> None:
    """The scheduler starts the run and stops; a `sluice worker` queues every next task."""
    gate = sluice.dags_folder.parent / "gate"
    (sluice.dags_folder / "long_chain.py").write_text(
        textwrap.dedent(
            f"""
    import time
    from pathlib import Path
    from sluice import DAG, task

    def first():
        while not Path({str(gate)!r}).exists():
            time.sleep(0.05)

    with DAG("long_chain", schedule=None) as dag:
        previous = task(task_id="t0")(first)
        for i in range(1, 6):
            current = task(task_id=f"t{{i}}")(lambda: None)
            previous >> current
            previous = current
    """
        )
    )
    scheduler = sluice.scheduler()
    sluice.worker()
    sluice.trigger("long_chain", "--run-id", "r1")
    wait_until(lambda: sluice.task_states("long_chain", "r1")["t0"]["state"] == "running")
    sluice.stop(scheduler)
    gate.touch()

    def all_done() -> bool:
        states = sluice.task_states("long_chain", "r1")
        return all(s["state"] == "success" for s in states.values())

    wait_until(all_done, timeout=30)
    assert sluice.db_run_state("long_chain", "r1") == "running"  # only a scheduler ends it
    sluice.scheduler()
    assert sluice.wait_run("long_chain", "r1") == "success"
    states = sluice.task_states("long_chain", "r1")
    assert all(s["try_number"] == 1 for s in states.values())
    ends = [dt.datetime.fromisoformat(states[f"t{i}"]["end_date"]) for i in range(6)]
    assert ends == sorted(ends)


def test_a_wide_fan_out_is_left_to_the_scheduler(harness: Harness) -> None:
    from sluice.scheduler.decide.plans import READ_LIMIT

    harness.write(
        "wide",
        f"""
    from sluice import DAG, task
    with DAG("wide", schedule=None, max_active_tasks=1000) as dag:
        root = task(task_id="root")(lambda: 0)
        for i in range({READ_LIMIT + 1}):
            root >> task(task_id=f"w{{i}}")(lambda: i)
    """,
    )
    run_pk = harness.trigger("wide")
    harness.run("root")
    assert harness.worker_queued() == []
    assert harness.news() == {run_pk}
    harness.job.tick(utcnow())
    assert len(harness.by_scheduler) == 1 + 128  # root, then as many as the pool holds


def test_a_wide_fan_in_is_queued_by_its_last_upstream_without_a_scheduler(
    harness: Harness,
) -> None:
    """A fan-in with more upstreams than a worker reads: each result's write says whether
    others are unfinished (and fills the slot it freed for a TI waiting in the pool); the
    last one queues the fan-in with one more query. No result wakes the schedulers."""
    from sluice.scheduler.decide.plans import READ_LIMIT

    harness.write(
        "wide_in",
        f"""
    from sluice import DAG, task
    with DAG("wide_in", schedule=None, max_active_tasks=1000) as dag:
        join = task(task_id="join")(lambda: 0)
        for i in range({READ_LIMIT + 1}):
            task(task_id=f"w{{i:04d}}")(lambda: i) >> join
    """,
    )
    harness.trigger("wide_in")
    assert len(harness.by_scheduler) == 128  # as many as the default pool holds
    done: set[str] = set()
    woken = []
    while len(done) < READ_LIMIT + 1:
        todo = [
            m
            for m in harness.by_scheduler + harness.by_worker
            if m.task_id not in done and m.task_id != "join"
        ]
        assert todo, "an upstream waits in the pool and nobody queued it"
        for msg in todo:
            assert run_task_instance(harness.worker, msg) is Outcome.SUCCESS
            done.add(msg.task_id)
            woken.append(bool(harness.news()))
    assert woken == [False] * (READ_LIMIT + 1)
    assert harness.worker_queued()[-1] == "join"
    assert harness.run("join") is Outcome.SUCCESS


def test_a_fan_in_with_a_failed_upstream_is_decided_not_queued(harness: Harness) -> None:
    """The last upstream queues the fan-in only when every upstream succeeded: after a
    failure, the decision marks it upstream_failed."""
    harness.write(
        "failing_in",
        """
    from sluice import DAG, task

    def boom():
        raise RuntimeError("no")

    with DAG("failing_in", schedule=None, default_args={"retries": 0}) as dag:
        join = task(task_id="join")(lambda: 0)
        task(task_id="bad")(boom) >> join
        for i in range(3):
            task(task_id=f"ok{i}")(lambda: i) >> join
    """,
    )
    run_pk = harness.trigger("failing_in")
    harness.run("bad")
    for i in range(3):
        assert harness.run(f"ok{i}") is Outcome.SUCCESS
    assert "join" not in harness.worker_queued()
    harness.job.tick(utcnow())
    with harness.factory() as session:
        state = session.scalar(
            select(TaskInstance.state).where(
                TaskInstance.dag_run_id == run_pk, TaskInstance.task_id == "join"
            )
        )
    assert state == "upstream_failed"


def test_the_last_two_results_of_a_join_racing_queue_it_once(harness: Harness) -> None:
    """Two workers finish a join's last two upstreams at the same time, again and again:
    each time exactly one of them queues the join (neither waits for the other)."""
    harness.write(
        "race",
        """
    from sluice import DAG, task
    with DAG("race", schedule=None, max_active_runs=100) as dag:
        left = task(task_id="left")(lambda: 1)
        right = task(task_id="right")(lambda: 2)
        join = task(task_id="join")(lambda: 3)
        [left, right] >> join
    """,
    )
    for _ in range(8):
        harness.by_scheduler.clear()
        harness.by_worker.clear()
        harness.trigger("race")
        start = threading.Barrier(2)

        def finish(task_id: str, start: threading.Barrier = start) -> None:
            start.wait(5)
            harness.run(task_id)

        threads = [threading.Thread(target=finish, args=(t,)) for t in ("left", "right")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
        assert harness.worker_queued() == ["join"]


FAN_IN = """
from sluice import DAG, task
with DAG("fan_in", schedule=None) as dag:
    join = task(task_id="join")(lambda: 9)
    for i in range(3):
        def work(i=i):
            if i == 1:
                print("upstream one says hello")
            return i
        task(task_id=f"u{i}")(work) >> join
"""


def test_fan_in_results_with_and_without_a_log_lead_to_one_join(harness: Harness) -> None:
    """A fan-in's upstreams: the quiet ones are recorded in one query each, the one that
    printed stores its log in the same transaction as its result; the last queues the join."""
    harness.write("fan_in", FAN_IN)
    harness.trigger("fan_in")
    for task_id in ("u0", "u1"):
        assert harness.run(task_id) is Outcome.SUCCESS
        assert harness.states()["join"] == "none" and harness.news() == set()
    with harness.factory() as session:
        logs = session.execute(select(TaskLog.content).join(TaskInstance)).scalars().all()
    assert ["upstream one says hello" in content for content in logs] == [True]
    assert harness.run("u2") is Outcome.SUCCESS
    assert harness.worker_queued() == ["join"] and harness.states()["join"] == "queued"


def record_an_older_try(harness: Harness, dag_id: str, task_id: str) -> Recorded:
    """`task_id` running as "the-current-try"; a quiet success of "an-older-try" recorded
    through the worker's one entry point for results."""
    with transaction(harness.factory) as session:
        session.execute(
            update(TaskInstance)
            .where(TaskInstance.task_id == task_id)
            .values(state="running", attempt_id="the-current-try")
        )
    with harness.factory() as session:
        dag = session.get(Dag, dag_id)
        ti = session.scalars(select(TaskInstance).where(TaskInstance.task_id == task_id)).one()
        session.expunge_all()
    assert dag is not None
    values = {"result": "0", "error": None, "next_retry_at": None}
    shape, plan = decision(dag, task_id, ti.pool, TI.SUCCESS, decides=True, map_index=-1)
    return record_result(
        Case(
            factory=harness.factory,
            ti_id=ti.id,
            attempt_id="an-older-try",
            task_id=task_id,
            run_pk=ti.dag_run_id,
            pool=ti.pool,
            dag=dag,
            new=TI.SUCCESS,
            values=values,
            task_log=None,
            tracing=False,
            shape=shape,
            plan=plan,
        )
    )


def test_a_fan_in_result_of_another_try_changes_nothing(harness: Harness) -> None:
    """The one-query fan-in result is a compare-and-set like any: a try that is no longer
    the running one (cleared and re-queued meanwhile) writes nothing."""
    harness.write("fan_in", FAN_IN)
    harness.trigger("fan_in")
    recorded = record_an_older_try(harness, "fan_in", "u0")
    assert (recorded.path, recorded.won, recorded.follow) == ("fan_in_at_once", False, None)
    assert harness.states()["u0"] == "running"


def test_a_lost_decision_after_the_last_result_is_left_to_the_scheduler(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last upstream's result is committed; the query deciding the join fails (the
    database went away): the schedulers are woken and their next tick queues the join.
    (An all_done join: an all_success one is queued by a query of its own.)"""
    harness.write(
        "fan_in", FAN_IN.replace('task_id="join"', 'task_id="join", trigger_rule="all_done"')
    )
    run_pk = harness.trigger("fan_in")
    harness.run("u0")
    harness.run("u1")
    import sluice.broker.worker.result.at_once

    def unreachable(*_args: object, **_kwargs: object) -> None:
        raise OperationalError("BEGIN", None, Exception("server closed the connection"))

    monkeypatch.setattr(sluice.broker.worker.result.at_once, "transaction_opened_by", unreachable)
    assert harness.run("u2") is Outcome.SUCCESS  # a quiet task: its result is one query
    assert harness.states()["u2"] == "success" and harness.states()["join"] == "none"
    assert harness.news() == {run_pk}
    monkeypatch.undo()
    harness.job.tick(utcnow())
    assert harness.states()["join"] == "queued"
    assert [m.task_id for m in harness.by_scheduler][-1] == "join"


@pytest.mark.parametrize(("choice", "join_state"), [("'join'", "queued"), ("[]", "skipped")])
def test_a_branch_that_is_a_join_s_last_upstream_decides_it_by_its_choice(
    harness: Harness, choice: str, join_state: str
) -> None:
    """The last upstream of a join is a branch task: its choice (its result) decides the
    join, queued when chosen, skipped when not."""
    harness.write(
        "branch_join",
        f"""
    from sluice import DAG, task
    with DAG("branch_join", schedule=None) as dag:
        a = task(task_id="a")(lambda: 1)
        pick = task.branch(task_id="pick")(lambda: {choice})
        join = task(task_id="join", trigger_rule="none_failed")(lambda: 2)
        [a, pick] >> join
    """,
    )
    harness.trigger("branch_join")
    assert harness.run("a") is Outcome.SUCCESS
    assert harness.states()["join"] == "none"
    assert harness.run("pick") is Outcome.SUCCESS
    assert harness.states()["join"] == join_state


def test_a_chain_link_of_another_try_queues_nothing(harness: Harness) -> None:
    """The one-query chain result is a compare-and-set: a try that is no longer the
    running one writes nothing, and the next task stays `none` (its upstream did not
    succeed)."""
    harness.write("chain", CHAIN)
    harness.trigger("chain")
    recorded = record_an_older_try(harness, "chain", "a")
    assert (recorded.path, recorded.won, recorded.follow) == ("chain_at_once", False, None)
    assert harness.states() == {"a": "running", "b": "none", "c": "none"}


def test_a_chain_link_whose_next_may_not_run_on_its_success_is_not_a_chain(
    harness: Harness,
) -> None:
    """A downstream whose trigger rule does not run after one success (one_failed) is
    decided as before: skipped, and the scheduler woken for the cascade."""
    harness.write(
        "on_failure",
        """
    from sluice import DAG, task
    with DAG("on_failure", schedule=None) as dag:
        a = task(task_id="a")(lambda: 1)
        alert = task(task_id="alert", trigger_rule="one_failed")(lambda: 2)
        a >> alert
    """,
    )
    run_pk = harness.trigger("on_failure")
    assert harness.run("a") is Outcome.SUCCESS
    assert harness.states()["alert"] == "skipped"
    assert harness.worker_queued() == [] and harness.news() == {run_pk}


def test_a_chain_link_s_next_waits_behind_higher_priority_tis_in_its_pool(
    harness: Harness,
) -> None:
    """The slot a chain link frees goes to the TI already waiting in its pool with a
    higher priority; its next task waits in `scheduled` (the schedulers' order)."""
    harness.add_pool("small", 2)
    harness.write(
        "busy_pool",
        """
    from sluice import DAG, task
    with DAG("busy_pool", schedule=None) as dag:
        a = task(task_id="a", pool="small", priority_weight=100)(lambda: 1)
        b = task(task_id="b", pool="small", priority_weight=1)(lambda: 2)
        w1 = task(task_id="w1", pool="small", priority_weight=50)(lambda: 3)
        w2 = task(task_id="w2", pool="small", priority_weight=50)(lambda: 4)
        a >> b
    """,
    )
    harness.trigger("busy_pool")
    assert harness.states() == {"a": "queued", "w1": "queued", "w2": "scheduled", "b": "none"}
    assert harness.run("a") is Outcome.SUCCESS
    assert harness.worker_queued() == ["w2"]
    assert harness.states() == {"a": "success", "w1": "queued", "w2": "queued", "b": "scheduled"}


def test_a_fan_in_upstream_fills_a_backlogged_pool_in_its_own_query(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While TIs wait in a pool, a fan-in upstream's result gives the slot it frees to the
    first of them in the result's own query (`filled`) once this process has seen the
    backlog (the first result fills in one more query, `fill`); every TI is queued once,
    in the pool's order, and the last upstream still queues the join."""
    monkeypatch.setattr(at_once, "_BACKLOG", {})  # this process has seen no backlog yet
    harness.add_pool("small", 2)
    harness.write(
        "backlog",
        """
    from sluice import DAG, task
    with DAG("backlog", schedule=None) as dag:
        root = task(task_id="root")(lambda: 0)
        join = task(task_id="join")(lambda: 9)
        for i in range(4):
            up = task(task_id=f"u{i}", pool="small", priority_weight=10 - i)(lambda: i)
            root >> up >> join
    """,
    )
    harness.trigger("backlog")
    harness.run("root")
    assert harness.worker_queued() == ["u0", "u1"]  # the pool's two slots
    expected = [
        ("u0", "fan_in_at_once, then fill", ["u2"]),  # the backlog seen: one more query
        ("u1", "fan_in_at_once, then filled", ["u3"]),  # filled by the result's query
        ("u2", "fan_in_at_once, then nothing", []),  # nobody left waiting
        ("u3", "fan_in_at_once, then join", ["join"]),  # the last upstream
    ]
    for task_id, path, queued in expected:
        before = len(harness.by_worker)
        assert harness.run(task_id) is Outcome.SUCCESS
        sent = [m.task_id for m in harness.by_worker[before:]]
        assert (task_id, harness.path(), sent) == (task_id, path, queued)
    assert harness.worker_queued() == ["u0", "u1", "u2", "u3", "join"]  # each once
    assert harness.states() == {
        "root": "success",
        **{f"u{i}": "success" for i in range(4)},
        "join": "queued",
    }


def test_a_task_with_no_downstream_is_one_query_and_the_last_wakes_the_schedulers(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A quiet success of a task with no downstream is one query (`leaf_at_once`): while
    other TIs of the run are unfinished it wakes nobody, and the slot it frees goes to the
    first TI waiting in its pool (in one more query until this process has seen the
    backlog, then in the result's own); the run's last one wakes the schedulers, which end
    the run."""
    monkeypatch.setattr(at_once, "_BACKLOG", {})  # this process has seen no backlog yet
    harness.add_pool("small", 1)
    harness.write(
        "leaves",
        """
    from sluice import DAG, task
    with DAG("leaves", schedule=None) as dag:
        root = task(task_id="root")(lambda: 0)
        for i in range(3):
            root >> task(task_id=f"l{i}", pool="small", priority_weight=10 - i)(lambda: i)
    """,
    )
    run_pk = harness.trigger("leaves")
    harness.run("root")
    assert harness.worker_queued() == ["l0"]  # the pool's one slot; l1 and l2 wait
    expected = [
        ("l0", "leaf_at_once, then fill", ["l1"], set()),  # the backlog seen: one more query
        ("l1", "leaf_at_once, then filled", ["l2"], set()),  # filled by the result's query
        ("l2", "leaf_at_once, then wake", [], {run_pk}),  # the run's last unfinished TI
    ]
    for task_id, path, queued, news in expected:
        harness.waker.take_news()  # what came before
        before = len(harness.by_worker)
        assert harness.run(task_id) is Outcome.SUCCESS
        sent = [m.task_id for m in harness.by_worker[before:]]
        woken = harness.waker.take_news()
        assert (task_id, harness.path(), sent, woken) == (task_id, path, queued, news)
    harness.waker.wake(run_pk)
    harness.job.tick(utcnow())  # woken: the scheduler ends the run
    assert harness.run_state(run_pk) == "success"
    assert harness.worker_queued() == ["l0", "l1", "l2"]  # each once


def _queued_in(harness: Harness, run_pk: int) -> dict[str, str]:
    """The states of run `run_pk`'s TIs by task id."""
    with harness.factory() as session:
        rows = session.execute(
            select(TaskInstance.task_id, TaskInstance.state).where(
                TaskInstance.dag_run_id == run_pk
            )
        ).all()
    return {t: str(s) for t, s in rows}


def _message_of(harness: Harness, run_pk: int, task_id: str) -> RunMessage:
    with harness.factory() as session:
        run_id = session.scalar(select(DagRun.run_id).where(DagRun.id == run_pk))
    sent = [
        m
        for m in harness.by_scheduler + harness.by_worker
        if m.task_id == task_id and m.run_id == run_id
    ]
    assert len(sent) == 1, f"{task_id} of run {run_pk} queued {len(sent)} times"
    return sent[0]


def test_a_fan_out_is_one_query_that_queues_by_priority_what_fits(harness: Harness) -> None:
    """A success whose downstream all wait for it alone, in its pool: its result, their
    scheduling and their queueing by priority into the room there is are one query
    (`fan_out_at_once`); the one that did not fit waits, and the schedulers are woken."""
    harness.add_pool("small", 3)
    harness.write(
        "spread",
        """
    from sluice import DAG, task
    with DAG("spread", schedule=None) as dag:
        root = task(task_id="root", pool="small", priority_weight=9)(lambda: 0)
        for i in range(4):
            root >> task(task_id=f"d{i}", pool="small", priority_weight=5 - i)(lambda: i)
    """,
    )
    run_pk = harness.trigger("spread")
    harness.waker.take_news()
    assert harness.run("root") is Outcome.SUCCESS
    assert harness.path() == "fan_out_at_once, then wake"  # d3 does not fit: a pass may
    assert harness.worker_queued() == ["d0", "d1", "d2"]  # by priority, as many as fit
    assert harness.states()["d3"] == "scheduled"
    assert harness.news() == {run_pk}
    harness.waker.take_news()
    assert harness.run("d1") is Outcome.SUCCESS  # frees a slot: d3 gets it
    assert harness.worker_queued() == ["d0", "d1", "d2", "d3"]  # each once


def test_a_fan_out_queues_all_its_downstream_when_they_fit(harness: Harness) -> None:
    harness.write(
        "spread",
        """
    from sluice import DAG, task
    with DAG("spread", schedule=None) as dag:
        root = task(task_id="root")(lambda: 0)
        root >> [task(task_id=f"d{i}")(lambda: i) for i in range(5)]
    """,
    )
    harness.trigger("spread")
    harness.waker.take_news()
    harness.run("root")
    assert harness.path() == "fan_out_at_once, then queued"
    assert sorted(harness.worker_queued()) == [f"d{i}" for i in range(5)]
    assert harness.news() == set()


def test_a_fan_out_behind_other_runs_fills_its_slot_by_priority_and_age(
    harness: Harness,
) -> None:
    """Another run's TI waits in the pool: the slot the result frees goes to the first in
    line (here that run's root), the fan-out's downstream wait behind it, and nobody is
    woken (the results in the pool fill their slots); each TI is queued once."""
    harness.add_pool("small", 1)
    harness.write(
        "spread",
        """
    from sluice import DAG, task
    with DAG("spread", schedule=None) as dag:
        root = task(task_id="root", pool="small", priority_weight=5)(lambda: 0)
        for i in range(2):
            root >> task(task_id=f"d{i}", pool="small", priority_weight=2)(lambda: i)
    """,
    )
    first = harness.trigger("spread")
    second = harness.trigger("spread")
    harness.waker.take_news()
    assert _queued_in(harness, second)["root"] == "scheduled"  # the pool's one slot: first's

    assert harness.run_message(_message_of(harness, first, "root")) is Outcome.SUCCESS
    assert harness.path() == "fan_out_at_once, then waiting"
    assert harness.news() == set()
    assert _queued_in(harness, second)["root"] == "queued"  # first in line: priority 5
    assert _queued_in(harness, first) == {"root": "success", "d0": "scheduled", "d1": "scheduled"}

    assert harness.run_message(_message_of(harness, second, "root")) is Outcome.SUCCESS
    assert harness.path() == "fan_out_at_once, then waiting"
    # priority 2 all: the first run's downstream were scheduled first
    assert _queued_in(harness, first)["d0"] == "queued"
    assert _queued_in(harness, second) == {"root": "success", "d0": "scheduled", "d1": "scheduled"}
    for run_pk, task_id in [(first, "d0"), (first, "d1"), (second, "d0"), (second, "d1")]:
        assert harness.run_message(_message_of(harness, run_pk, task_id)) is Outcome.SUCCESS
    assert set(_queued_in(harness, first).values()) == {"success"}
    assert set(_queued_in(harness, second).values()) == {"success"}


def test_a_join_that_does_not_fit_waits_in_its_pool_from_the_same_query(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last upstream of a join whose pool has other runs' TIs waiting: the join goes
    to `scheduled` in the query that tried to queue it (no transaction after), behind
    them, and each run's join is queued once, in line."""
    monkeypatch.setattr(at_once, "_BACKLOG", {})
    harness.add_pool("small", 1)
    harness.write(
        "joins",
        """
    from sluice import DAG, task
    with DAG("joins", schedule=None) as dag:
        join = task(task_id="join", pool="small", priority_weight=1)(lambda: 9)
        for i in range(2):
            task(task_id=f"u{i}", pool="small", priority_weight=3)(lambda: i) >> join
    """,
    )
    first = harness.trigger("joins")
    second = harness.trigger("joins")
    harness.waker.take_news()
    harness.run_message(_message_of(harness, first, "u0"))
    assert harness.path() == "fan_in_at_once, then fill"

    def no_transaction_after(*_: object) -> None:
        raise AssertionError("the join was decided in a transaction of its own")

    monkeypatch.setattr(at_once, "_decide_after", no_transaction_after)
    harness.run_message(_message_of(harness, first, "u1"))
    assert harness.path() == "fan_in_at_once, then join"  # the slot filled by its own query
    assert _queued_in(harness, first)["join"] == "scheduled"
    assert harness.news() == set()
    for task_id in ["u0", "u1"]:
        harness.run_message(_message_of(harness, second, task_id))
    assert _queued_in(harness, first)["join"] == "queued"  # older: first in line
    assert _queued_in(harness, second)["join"] == "scheduled"
    harness.run_message(_message_of(harness, first, "join"))
    assert _queued_in(harness, second)["join"] == "queued"
    harness.run_message(_message_of(harness, second, "join"))
    assert set(_queued_in(harness, first).values()) == {"success"}
    assert set(_queued_in(harness, second).values()) == {"success"}


def test_each_result_is_recorded_by_its_path(harness: Harness) -> None:
    """The worker's result paths, in the order of `PATHS`: a quiet fan-in upstream, a
    quiet chain link, a quiet fan-out and a quiet task with no downstream are one query
    each; a result
    with a log is decided in a transaction;
    a failure is written alone and wakes the schedulers."""
    harness.write("fan_in", FAN_IN)
    harness.write(
        "links",
        """
    from sluice import DAG, task
    def noisy():
        print("a log to store")
        return 1
    def boom():
        raise RuntimeError("no")
    with DAG("links", schedule=None) as dag:
        task(task_id="quiet")(lambda: 0) >> task(task_id="noisy")(noisy)
        task(task_id="spread")(lambda: 3) >> [task(task_id=f"s{i}")(lambda: i) for i in range(2)]
        task(task_id="quiet_end")(lambda: 2)
        task(task_id="noisy_end")(noisy)
        task(task_id="boom")(boom)
    """,
    )
    harness.trigger("fan_in")
    run_pk = harness.trigger("links")
    expected = [
        ("u0", "fan_in_at_once, then nothing"),  # another upstream unfinished
        ("u1", "decided"),  # it printed: its log goes with its result
        ("u2", "fan_in_at_once, then join"),  # the last: the join queued by one query
        ("quiet", "chain_at_once, then queued"),  # its next task queued in the same query
        ("spread", "fan_out_at_once, then queued"),  # its downstream queued in its query
        ("quiet_end", "leaf_at_once, then nothing"),  # no downstream, other TIs unfinished
        ("noisy_end", "decided"),
        ("boom", "written"),  # a failure: the schedulers decide what follows
    ]
    for task_id, path in expected:
        harness.run(task_id)
        assert (task_id, harness.path()) == (task_id, path)
    assert harness.states()["noisy"] == "queued"
    assert harness.news() == {run_pk}
