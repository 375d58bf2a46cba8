"""Creating a run, on SQLite and PostgreSQL: one INSERT of the run (no read first), and a
clash (a run id or logical date the DAG has already) that writes nothing and leaves the
transaction usable, so a scheduler creating several runs in one transaction keeps the
others."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event, func, select
from sqlalchemy.orm import Session, sessionmaker

from sluice.scheduler.core.db import make_engine, make_session_factory, transaction
from sluice.scheduler.core.migrate import upgrade
from sluice.scheduler.core.models import Dag, DagRun, TaskInstance
from sluice.scheduler.core.states import DagRunState, RunType, SpanStatus
from sluice.scheduler.scheduling.dagrun import RunExists, create_dagrun

NOW = dt.datetime(2026, 3, 1, 12, tzinfo=dt.UTC)
TASKS = ["extract", "load"]
SPEC: dict[str, Any] = {
    "dag_id": "d",
    "tasks": {
        "extract": {"task_id": "extract", "upstream": [], "downstream": ["load"]},
        "load": {"task_id": "load", "upstream": ["extract"], "downstream": []},
    },
}


@pytest.fixture(params=["sqlite", "postgresql"])
def factory(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[sessionmaker[Session]]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'runs.db'}"
    else:
        url = request.getfixturevalue("pg_url")
    engine = make_engine(url)
    upgrade(engine)
    with transaction(make_session_factory(engine)) as session:
        session.add(Dag(dag_id="d", fileloc="/d.py", version_hash="h1", serialized=SPEC))
    yield make_session_factory(engine)
    engine.dispose()


def _create(session: Session, run_id: str | None, day: int, dag: Dag | None = None) -> DagRun:
    dag = dag or session.get(Dag, "d")
    assert dag is not None
    logical = NOW + dt.timedelta(days=day)
    return create_dagrun(
        session, dag, run_type=RunType.MANUAL, logical_date=logical, now=NOW, run_id=run_id
    )


def _counts(factory: sessionmaker[Session]) -> tuple[int, int]:
    with factory() as session:
        runs = session.scalar(select(func.count()).select_from(DagRun))
        tis = session.scalar(select(func.count()).select_from(TaskInstance))
        return int(runs or 0), int(tis or 0)


def test_a_run_is_one_insert_with_its_tis(factory: sessionmaker[Session]) -> None:
    statements: list[str] = []
    with transaction(factory) as session:
        dag = session.get(Dag, "d")  # read before, as every caller has it

        def seen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
            statements.append(" ".join(statement.split())[:40].upper())

        event.listen(session.get_bind(), "before_cursor_execute", seen)
        try:
            run = _create(session, "r1", 0, dag)
        finally:
            event.remove(session.get_bind(), "before_cursor_execute", seen)
        assert (run.run_id, run.state, run.dag_hash) == ("r1", DagRunState.QUEUED, "h1")
        assert (run.span_status, run.conf, run.queued_at) == (SpanStatus.NOT_STARTED, {}, NOW)
        assert run.id is not None and run in session
    assert [s.split(" (")[0] for s in statements] == [
        "INSERT INTO DAG_RUN",
        "INSERT INTO TASK_INSTANCE",
    ], statements
    with factory() as session:
        tis = session.scalars(select(TaskInstance).where(TaskInstance.dag_run_id == run.id))
        assert sorted(ti.task_id for ti in tis) == TASKS


@pytest.mark.parametrize(("run_id", "day"), [("r1", 5), (None, 0)], ids=["run-id", "date"])
def test_a_clash_writes_nothing_and_keeps_the_transaction(
    factory: sessionmaker[Session], run_id: str | None, day: int
) -> None:
    with transaction(factory) as session:
        _create(session, "r1", 0)
    before = _counts(factory)

    with transaction(factory) as session:
        kept = _create(session, "r2", 1)  # written earlier in the same transaction
        with pytest.raises(RunExists, match="already has a run 'r1' for that run id or date"):
            _create(session, run_id, day)
        after_the_clash = _create(session, "r3", 2)  # the transaction goes on
        assert kept.id != after_the_clash.id

    with factory() as session:
        names = session.scalars(select(DagRun.run_id).order_by(DagRun.run_id)).all()
    assert names == ["r1", "r2", "r3"]
    assert _counts(factory) == (before[0] + 2, before[1] + 2 * len(TASKS))
