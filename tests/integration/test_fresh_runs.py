"""A scheduler pass decides the runs it started from their DAG alone (`fresh_runs`): one
UPDATE schedules the roots of all of them, on PostgreSQL and on SQLite. A run whose TIs
are not all `none` (cleared, then queued again) and a DAG whose start is not just its
roots (a mapped root) are decided by reading the run, as before. A run triggered during
a pass starts, and its roots are scheduled, no earlier than it was queued."""

from __future__ import annotations

import datetime as dt
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, select, update

from sluice.broker.wakeup import LocalWaker
from sluice.scheduler.core.db import make_engine, make_session_factory, transaction, utcnow
from sluice.scheduler.core.messages import RunMessage
from sluice.scheduler.core.models import Dag, DagRun, TaskInstance
from sluice.scheduler.core.settings import Settings
from sluice.scheduler.core.states import TI, DagRunState, RunType
from sluice.scheduler.jobs.scheduler_job import SchedulerJob
from sluice.scheduler.scheduling.dagrun import create_dagrun
from sluice.scheduler.scheduling.fresh_runs import fresh_roots

DIAMOND = """
from sluice import DAG, task
with DAG("diamond", schedule=None) as dag:
    first = task(task_id="first")(lambda: 0)
    second = task(task_id="second")(lambda: 0)
    join = task(task_id="join")(lambda: 1)
    for i in range(3):
        mid = task(task_id=f"m{i}")(lambda: i)
        [first, second] >> mid >> join
"""

MAPPED_ROOT = """
from sluice import DAG, task
with DAG("mapped_root", schedule=None) as dag:
    @task
    def each(x: int) -> int:
        return x

    @task
    def total(values: list[int]) -> int:
        return sum(values)

    total(each.expand(x=[1, 2, 3]))
"""


class Harness:
    def __init__(self, url: str, folder: Path) -> None:
        self.engine = make_engine(url)
        self.factory = make_session_factory(self.engine)
        self.folder = folder
        self.sent: list[RunMessage] = []
        settings = Settings(database_url=url, dags_folder=folder, dag_refresh_interval=0.001)
        self.job = SchedulerJob(settings, self.factory, self.sent.extend, LocalWaker())
        self.job.register()
        self.statements: list[str] = []
        event.listen(self.engine, "before_cursor_execute", self._seen)

    def _seen(self, _conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        self.statements.append(statement)

    def write(self, name: str, body: str) -> None:
        (self.folder / f"{name}.py").write_text(textwrap.dedent(body))
        self.job.tick(utcnow())  # parse it

    def trigger(self, dag_id: str, n: int = 1) -> list[int]:
        with transaction(self.factory) as session:
            dag = session.get(Dag, dag_id)
            assert dag is not None
            now = utcnow()
            runs = [
                create_dagrun(
                    session,
                    dag,
                    run_type=RunType.MANUAL,
                    logical_date=now + dt.timedelta(microseconds=i),
                    now=now,
                )
                for i in range(n)
            ]
            pks = [run.id for run in runs]
        self.job.waker.wake()
        return pks

    def tick(self) -> list[str]:
        """One pass; the statements it sent."""
        self.statements.clear()
        self.job.tick(utcnow())
        return list(self.statements)

    def states(self, run_pk: int) -> dict[tuple[str, int], str]:
        with self.factory() as session:
            rows = session.execute(
                select(TaskInstance.task_id, TaskInstance.map_index, TaskInstance.state).where(
                    TaskInstance.dag_run_id == run_pk
                )
            ).all()
        return {(t, m): str(s) for t, m, s in rows}


@pytest.fixture(params=["pg_url", "sqlite_url"])
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    folder = tmp_path / "dags"
    folder.mkdir()
    h = Harness(request.getfixturevalue(request.param), folder)
    yield h
    h.engine.dispose()


def _one_line(statement: str) -> str:
    return " ".join(statement.split())


def _fresh_updates(statements: list[str]) -> int:
    """`schedule_fresh_roots` (scheduling.sql on PostgreSQL, its twin on SQLite)."""
    return sum(
        _one_line(s).startswith("UPDATE task_instance SET state") and "other" in s
        for s in statements
    )


def _run_reads(statements: list[str]) -> int:
    """The per-run reads of `update_state` (`run_tis_to_decide`: every TI of one run)."""
    starts = (
        "SELECT task_instance.id, task_instance.task_id",
        "SELECT id, task_id, state, next_retry_at",
    )
    return sum(_one_line(s).startswith(starts) for s in statements)


def test_a_pass_schedules_the_roots_of_the_runs_it_started_in_one_statement(
    harness: Harness,
) -> None:
    harness.write("diamond", DIAMOND)
    pks = harness.trigger("diamond", 5)

    statements = harness.tick()

    # one UPDATE for the five runs, no run read one by one
    assert (_fresh_updates(statements), _run_reads(statements)) == (1, 0), statements
    for pk in pks:
        states = harness.states(pk)
        assert states.pop(("first", -1)) == states.pop(("second", -1)) == "queued"
        assert set(states.values()) == {"none"}
    assert sorted(m.task_id for m in harness.sent) == ["first"] * 5 + ["second"] * 5
    with harness.factory() as session:
        runs = session.scalars(select(DagRun).where(DagRun.id.in_(pks))).all()
    assert {run.state for run in runs} == {DagRunState.RUNNING}
    assert all(run.last_scheduling_decision is not None for run in runs)


def test_a_run_queued_again_with_finished_tis_is_decided_by_reading_it(
    harness: Harness,
) -> None:
    """A run whose roots succeeded and that was queued again (as a clear of its other
    tasks leaves it): its roots stay as they are and what follows them is scheduled."""
    harness.write("diamond", DIAMOND)
    [pk] = harness.trigger("diamond")
    with transaction(harness.factory) as session:
        session.execute(
            update(TaskInstance)
            .where(TaskInstance.dag_run_id == pk, TaskInstance.task_id.in_(["first", "second"]))
            .values(state=TI.SUCCESS, try_number=1)
        )
        session.execute(update(DagRun).where(DagRun.id == pk).values(state=DagRunState.QUEUED))

    statements = harness.tick()

    assert _run_reads(statements) >= 1, statements
    states = harness.states(pk)
    assert states[("first", -1)] == states[("second", -1)] == "success"
    assert {states[(f"m{i}", -1)] for i in range(3)} == {"queued"}
    assert states[("join", -1)] == "none"
    assert sorted(m.task_id for m in harness.sent) == ["m0", "m1", "m2"]


def test_a_mapped_root_is_expanded_when_its_run_starts(harness: Harness) -> None:
    harness.write("mapped_root", MAPPED_ROOT)
    with harness.factory() as session:
        dag = session.get(Dag, "mapped_root")
        assert dag is not None
        assert fresh_roots(dag) is None  # its start is an expansion, not a move
    [pk] = harness.trigger("mapped_root")

    harness.tick()

    states = harness.states(pk)
    assert {states[("each", i)] for i in range(3)} == {"queued"}
    assert states[("total", -1)] == "none"


def test_fresh_roots_are_the_tasks_a_run_of_all_none_tis_schedules(harness: Harness) -> None:
    harness.write("diamond", DIAMOND)
    with harness.factory() as session:
        dag = session.get(Dag, "diamond")
        assert dag is not None
        assert fresh_roots(dag) == ("first", "second")


def test_a_run_triggered_after_the_pass_read_its_clock_starts_after_it_was_queued(
    harness: Harness,
) -> None:
    """A pass reads its clock, then the queued runs: a run committed in between (a trigger
    during the pass) was queued after that clock. It must not start before it was queued,
    nor its roots be scheduled or queued before the run started (a burst of REST triggers
    showed runs started up to 46 ms before their queued time)."""
    harness.write("diamond", DIAMOND)
    pass_clock = utcnow()  # read by the pass before the trigger below commits
    [pk] = harness.trigger("diamond")

    harness.job.tick(pass_clock)

    with harness.factory() as session:
        run = session.get(DagRun, pk)
        assert run is not None
        roots = session.scalars(
            select(TaskInstance).where(
                TaskInstance.dag_run_id == pk, TaskInstance.task_id.in_(["first", "second"])
            )
        ).all()
    assert run.state == DagRunState.RUNNING
    assert run.queued_at is not None and run.start_date is not None
    assert run.start_date >= run.queued_at > pass_clock
    assert [ti.state for ti in roots] == [TI.QUEUED, TI.QUEUED]
    for ti in roots:
        assert ti.scheduled_at is not None and ti.queued_at is not None
        assert ti.queued_at >= ti.scheduled_at >= run.start_date
