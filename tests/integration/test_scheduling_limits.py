"""Queueing decisions of one scheduler tick against real PostgreSQL (no worker needed).

The scheduler's `tick(now)` is called directly; `publish` records the messages
it would send, so the test sees exactly what was queued and in which order.
"""

from __future__ import annotations

import datetime as dt
import textwrap
from pathlib import Path

import pytest
from sqlalchemy import func, select

from sluice.broker.wakeup import LocalWaker, RedisWaker
from sluice.scheduler.core.db import make_engine, make_session_factory, transaction, utcnow
from sluice.scheduler.core.messages import RunMessage
from sluice.scheduler.core.models import Dag, DagRun, Pool, TaskInstance
from sluice.scheduler.core.settings import Settings
from sluice.scheduler.core.states import TI, DagRunState, RunType
from sluice.scheduler.jobs.scheduler_job import SchedulerJob
from sluice.scheduler.scheduling.dagrun import create_dagrun


class Harness:
    def __init__(self, url: str, folder: Path) -> None:
        self.engine = make_engine(url)
        self.factory = make_session_factory(self.engine)
        self.sent: list[RunMessage] = []
        settings = Settings(database_url=url, dags_folder=folder, dag_refresh_interval=0.001)
        self.job = SchedulerJob(settings, self.factory, self.sent.extend, LocalWaker())
        self.job.register()

    def trigger(self, dag_id: str, n: int = 1) -> None:
        with transaction(self.factory) as session:
            dag = session.get(Dag, dag_id)
            assert dag is not None
            for i in range(n):
                now = utcnow() + dt.timedelta(microseconds=i)
                create_dagrun(session, dag, run_type=RunType.MANUAL, logical_date=now, now=now)
        self.job.waker.wake()  # as `sluice dags trigger` does

    def states(self) -> dict[str, str]:
        with self.factory() as session:
            rows = session.execute(select(TaskInstance.task_id, TaskInstance.state)).all()
        return {t: s for t, s in rows}


@pytest.fixture
def harness(pg_url, tmp_path):
    folder = tmp_path / "dags"
    folder.mkdir()
    h = Harness(pg_url, folder)
    yield h
    h.engine.dispose()


def write(folder: Path, name: str, body: str) -> None:
    (folder / f"{name}.py").write_text(textwrap.dedent(body))


def test_max_active_tasks_limits_queueing(harness: Harness) -> None:
    write(
        harness.job.settings.dags_folder,
        "wide",
        """
    from sluice import DAG, task
    with DAG("wide", schedule=None, max_active_tasks=2) as dag:
        for i in range(5):
            task(task_id=f"t{i}")(lambda: None)
    """,
    )
    harness.job.tick(utcnow())
    harness.trigger("wide")
    harness.job.tick(utcnow())
    harness.job.tick(utcnow())
    assert len(harness.sent) == 2
    assert sorted(harness.states().values()) == ["queued"] * 2 + ["scheduled"] * 3


def test_pool_slots_and_priority_decide_who_goes_first(harness: Harness) -> None:
    with transaction(harness.factory) as session:
        session.add(Pool(name="small", slots=3))
    write(
        harness.job.settings.dags_folder,
        "pooled",
        """
    from sluice import DAG, task
    with DAG("pooled", schedule=None) as dag:
        task(task_id="low", pool="small", priority_weight=1)(lambda: None)
        task(task_id="high", pool="small", priority_weight=10)(lambda: None)
        task(task_id="double", pool="small", pool_slots=2, priority_weight=5)(lambda: None)
        task(task_id="elsewhere", priority_weight=0)(lambda: None)
    """,
    )
    harness.job.tick(utcnow())
    harness.trigger("pooled")
    harness.job.tick(utcnow())
    harness.job.tick(utcnow())
    # 3 slots: high (1) + double (2) fill it; low waits; the default pool is separate.
    assert [m.task_id for m in harness.sent] == ["high", "double", "elsewhere"]
    assert harness.states()["low"] == "scheduled"
    with harness.factory() as session:
        used = session.scalar(
            select(func.sum(TaskInstance.pool_slots)).where(
                TaskInstance.pool == "small", TaskInstance.state == TI.QUEUED
            )
        )
    assert used == 3


def test_max_active_runs_keeps_runs_queued(harness: Harness) -> None:
    write(
        harness.job.settings.dags_folder,
        "serial",
        """
    from sluice import DAG, task
    with DAG("serial", schedule=None, max_active_runs=1) as dag:
        task(task_id="only")(lambda: None)
    """,
    )
    harness.job.tick(utcnow())
    harness.trigger("serial", n=3)
    harness.job.tick(utcnow())
    with harness.factory() as session:
        states = sorted(session.scalars(select(DagRun.state)).all())
    assert states == [DagRunState.QUEUED, DagRunState.QUEUED, DagRunState.RUNNING]
    assert len(harness.sent) == 1


def test_scheduled_dag_gets_runs_from_its_schedule(harness: Harness) -> None:
    start = (utcnow() - dt.timedelta(hours=3)).replace(minute=0, second=0, microsecond=0)
    write(
        harness.job.settings.dags_folder,
        "hourly",
        f"""
    import datetime as dt
    from sluice import DAG, task
    with DAG("hourly", schedule="@hourly", catchup=True,
             start_date=dt.datetime.fromisoformat("{start.isoformat()}")) as dag:
        task(task_id="only")(lambda: None)
    """,
    )
    for _ in range(6):
        harness.job.tick(utcnow())
    with harness.factory() as session:
        dates = sorted(session.scalars(select(DagRun.logical_date)).all())
        types = set(session.scalars(select(DagRun.run_type)).all())
    assert dates[0] == start
    assert [d - start for d in dates] == [dt.timedelta(hours=i) for i in range(len(dates))]
    assert len(dates) in (3, 4)  # the interval that ends now may or may not be complete
    assert types == {"scheduled"}


def test_a_dag_held_by_its_own_limit_does_not_starve_others(harness: Harness) -> None:
    # Given a DAG with more high-priority scheduled TIs than one queueing batch holds,
    # held back by its own max_active_tasks, and a second DAG with one low-priority task
    write(
        harness.job.settings.dags_folder,
        "greedy",
        """
    from sluice import DAG, task
    with DAG("greedy", schedule=None, max_active_tasks=1) as dag:
        for i in range(600):
            task(task_id=f"t{i}", priority_weight=100)(lambda: None)
    """,
    )
    write(
        harness.job.settings.dags_folder,
        "modest",
        """
    from sluice import DAG, task
    with DAG("modest", schedule=None) as dag:
        task(task_id="only", priority_weight=1)(lambda: None)
    """,
    )
    harness.job.tick(utcnow())
    harness.trigger("greedy")
    harness.job.tick(utcnow())  # greedy fills its single slot; the rest stay scheduled
    harness.trigger("modest")
    # When the scheduler queues again
    harness.job.tick(utcnow())
    # Then the other DAG's task is queued although 599 higher-priority TIs wait
    assert [m.dag_id for m in harness.sent].count("greedy") == 1
    assert [m.task_id for m in harness.sent if m.dag_id == "modest"] == ["only"]


def test_runs_past_one_pass_limit_are_examined_without_waiting(harness: Harness) -> None:
    """Started runs beyond `runs_per_loop` are examined by the passes that follow at once
    (each says it is busy), not a loop interval later."""
    write(
        harness.job.settings.dags_folder,
        "small",
        """
    from sluice import DAG, task
    with DAG("small", schedule=None, max_active_runs=10) as dag:
        task(task_id="only")(lambda: None)
    """,
    )
    harness.job.settings = harness.job.settings.with_(runs_per_loop=2)
    now = utcnow()
    harness.job.tick(now)
    harness.trigger("small", 5)
    busy = [harness.job.tick(now).busy]  # the same instant: no pass is due by the clock
    while busy[-1] and len(busy) < 10:
        busy.append(harness.job.tick(now).busy)
    assert len(harness.sent) == 5
    assert busy[-1] is False  # and then the loop may wait


def test_a_burst_of_runs_is_split_between_two_schedulers(pg_url, redis_url, tmp_path) -> None:
    """Runs one scheduler started beyond its pass's limit go to the shared news: the
    other scheduler, woken, examines some of them; each first task is queued once."""
    folder = tmp_path / "dags"
    folder.mkdir()
    write(
        folder,
        "small",
        """
    from sluice import DAG, task
    with DAG("small", schedule=None, max_active_runs=10) as dag:
        task(task_id="only")(lambda: None)
    """,
    )
    settings = Settings(
        database_url=pg_url,
        broker_url=redis_url,
        dags_folder=folder,
        dag_refresh_interval=0.001,
        runs_per_loop=2,
    )
    engine = make_engine(pg_url)
    factory = make_session_factory(engine)
    sent: dict[str, list[RunMessage]] = {"a": [], "b": []}
    jobs = {
        name: SchedulerJob(settings, factory, sent[name].extend, RedisWaker(redis_url, "split", 2))
        for name in sent
    }
    try:
        now = utcnow()
        for job in jobs.values():
            job.register()
            job.tick(now)  # the first full pass of each
            job.waker.wait(0.01)  # subscribes
        with transaction(factory) as session:  # six runs, no wake-up: a timer finds them
            dag = session.get(Dag, "small")
            assert dag is not None
            for i in range(6):
                at = now + dt.timedelta(microseconds=i)
                create_dagrun(session, dag, run_type=RunType.MANUAL, logical_date=at, now=at)
        later = now + dt.timedelta(seconds=settings.loop_interval)
        assert jobs["a"].tick(later).busy  # starts the six, examines two, shares four
        assert jobs["b"].waker.wait(1)  # told of the shared news
        jobs["b"].tick(now)  # no full pass is due on its clock: only the news
        assert len(sent["b"]) == 2
        for _ in range(10):
            busy = [jobs["a"].tick(later).busy, jobs["b"].tick(now).busy]
            if not any(busy):
                break
        ti_ids = [m.ti_id for m in sent["a"] + sent["b"]]
        assert len(ti_ids) == len(set(ti_ids)) == 6
    finally:
        for job in jobs.values():
            job.waker.close()
        engine.dispose()
