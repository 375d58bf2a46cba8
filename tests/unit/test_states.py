"""The state tables and the one function that writes states (on SQLite)."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from sluice.scheduler.core.db import executed, make_engine, make_session_factory, transaction
from sluice.scheduler.core.migrate import upgrade
from sluice.scheduler.core.models import Dag, TaskInstance
from sluice.scheduler.core.states import (
    RUN_MOVES,
    TI,
    TI_MOVES,
    TI_TERMINAL,
    DagRunState,
    IllegalMove,
    RunType,
    check_ti_move,
)
from sluice.scheduler.core.transitions import move_run, move_ti
from sluice.scheduler.decide.downstream_sql import read_statement, success_reading
from sluice.scheduler.decide.plans import Plan

NOW = dt.datetime(2026, 3, 1, 12, tzinfo=dt.UTC)


def test_every_state_has_a_row_in_the_move_tables() -> None:
    assert set(TI_MOVES) == set(TI)
    assert set(RUN_MOVES) == set(DagRunState)


def test_terminal_states_only_leave_by_clear_removal_or_a_users_mark() -> None:
    marks = {TI.SUCCESS, TI.FAILED, TI.SKIPPED}
    for state in TI_TERMINAL:
        assert TI_MOVES[state] <= {TI.NONE, TI.REMOVED} | marks
        assert state not in TI_MOVES[state]
    # Sluice itself never moves a finished TI to another finished state
    assert TI.SUCCESS not in TI_MOVES[TI.UP_FOR_RETRY] - marks


def test_illegal_moves_are_refused() -> None:
    with pytest.raises(IllegalMove):
        check_ti_move(TI.NONE, TI.RUNNING)
    with pytest.raises(IllegalMove):
        check_ti_move(TI.SUCCESS, TI.RUNNING)
    check_ti_move(TI.QUEUED, TI.RUNNING)


@pytest.fixture
def factory(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'states.db'}")
    upgrade(engine)
    yield make_session_factory(engine)
    engine.dispose()


def _one_ti(factory) -> int:
    from sluice.scheduler.scheduling.dagrun import create_dagrun

    spec: dict[str, Any] = {
        "dag_id": "d",
        "schedule": None,
        "max_active_runs": 1,
        "max_active_tasks": 1,
        "tasks": {
            "t": {
                "task_id": "t",
                "upstream": [],
                "downstream": [],
                "retries": 0,
                "queue": "default",
                "pool": None,
                "pool_slots": 1,
                "priority_weight": 1,
                "trigger_rule": "all_success",
            }
        },
    }
    with transaction(factory) as session:
        session.add(Dag(dag_id="d", fileloc="/x.py", version_hash="h", serialized=spec))
        session.flush()
        dag = session.get(Dag, "d")
        assert dag is not None
        run = create_dagrun(session, dag, run_type=RunType.MANUAL, logical_date=NOW, now=NOW)
        assert move_run(session, run.id, DagRunState.RUNNING, expect=[DagRunState.QUEUED], now=NOW)
        return session.scalars(select(TaskInstance.id)).one()


def test_compare_and_set_stamps_and_guards_attempt(factory) -> None:
    ti_id = _one_ti(factory)
    with transaction(factory) as session:
        assert move_ti(session, ti_id, TI.SCHEDULED, expect=[TI.NONE], now=NOW)
        assert not move_ti(session, ti_id, TI.SCHEDULED, expect=[TI.NONE], now=NOW)
        assert move_ti(
            session, ti_id, TI.QUEUED, expect=[TI.SCHEDULED], now=NOW, values={"attempt_id": "a1"}
        )
    later = NOW + dt.timedelta(seconds=5)
    with transaction(factory) as session:
        # a stale message with another attempt id loses and changes nothing
        assert not move_ti(
            session, ti_id, TI.RUNNING, expect=[TI.QUEUED], now=later, attempt_id="a0"
        )
        assert move_ti(session, ti_id, TI.RUNNING, expect=[TI.QUEUED], now=later, attempt_id="a1")
        assert not move_ti(
            session, ti_id, TI.RUNNING, expect=[TI.QUEUED], now=later, attempt_id="a1"
        )
    with factory() as session:
        ti = session.get(TaskInstance, ti_id)
        assert ti.state == TI.RUNNING
        assert ti.scheduled_at == NOW and ti.queued_at == NOW and ti.start_date == later
        assert ti.start_date.tzinfo is not None


@pytest.fixture(params=["sqlite", "postgresql"])
def any_factory(request, tmp_path):
    url = (
        f"sqlite:///{tmp_path / 'states.db'}"
        if request.param == "sqlite"
        else request.getfixturevalue("pg_url")
    )
    engine = make_engine(url)
    upgrade(engine)
    yield make_session_factory(engine)
    engine.dispose()


def _running(factory, attempt: str) -> tuple[int, int]:
    """The one TI of `_one_ti`, running as `attempt`; its id and its run's key."""
    ti_id = _one_ti(factory)
    with transaction(factory) as session:
        for old, new in ((TI.NONE, TI.SCHEDULED), (TI.SCHEDULED, TI.QUEUED)):
            assert move_ti(session, ti_id, new, expect=[old], now=NOW)
        assert move_ti(
            session, ti_id, TI.RUNNING, expect=[TI.QUEUED], now=NOW, values={"attempt_id": attempt}
        )
        ti = session.get(TaskInstance, ti_id)
        assert ti is not None
        return ti_id, ti.dag_run_id


SUCCESS = {"result": "1", "error": None, "next_retry_at": None}
ONE_TASK = Plan(
    downstream=("t",),
    needed=frozenset({"t"}),
    read_ids=("t",),
    branches=(),
    pools=("default_pool",),
    whole_run=False,
    locks_pool=False,
    fan_in=None,
)
"""A decision's plan that reads the one task `t` of `_one_ti`'s DAG."""


def test_a_success_and_its_decision_s_read_share_one_statement(pg_url) -> None:
    """`write_success_reading_*` (decide.sql): the read sees the TI as it was before the
    write; a lost write says so (`moved` 0) and a won write with nothing to read is one
    row of Nones."""
    engine = make_engine(pg_url)
    upgrade(engine)
    factory = make_session_factory(engine)
    ti_id, run_pk = _running(factory, "a1")
    plan = ONE_TASK

    def success(session: Session, attempt: str, read_ids: tuple[str, ...]) -> list[Any]:
        read = read_statement(run_pk, replace(plan, read_ids=read_ids))
        sent = success_reading(read, ti_id=ti_id, attempt_id=attempt, now=NOW, values=SUCCESS)
        return executed(session, sent)

    with transaction(factory) as session:
        with session.begin_nested() as undone:
            assert [(r.moved, r.id) for r in success(session, "a1", ("nothing",))] == [(1, None)]
            undone.rollback()
        assert [r.moved for r in success(session, "stale", ("t",))] == [0]
        rows = success(session, "a1", ("t",))
        assert [(r.moved, r.id, r.state, r.pool_total) for r in rows] == [
            (1, ti_id, "running", None)
        ]
    with factory() as session:
        assert (
            session.scalar(select(TaskInstance.state).where(TaskInstance.id == ti_id)) == "success"
        )
    engine.dispose()


def test_a_decision_reads_the_tis_it_needs_and_locks_the_pool_it_says(any_factory) -> None:
    """`read_run_tis`/`read_named_tis` and their SQLite twins: the TIs named (or all), the
    pool's slots only when the plan locks it."""
    ti_id, run_pk = _running(any_factory, "a1")
    plan = ONE_TASK
    with transaction(any_factory) as session:
        for shape in (plan, replace(plan, whole_run=True)):
            for locks in (False, True):
                read = read_statement(run_pk, replace(shape, locks_pool=locks))
                rows = executed(session, read)
                assert [(r.id, r.task_id, r.backlog) for r in rows] == [(ti_id, "t", False)]
                assert rows[0].pool_total == (128 if locks else None)
