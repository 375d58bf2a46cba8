"""The state tables and the one function that writes states (on SQLite)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from sluice.scheduler.core.db import make_engine, make_session_factory, transaction
from sluice.scheduler.core.hot_sql import hot
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
from sluice.scheduler.core.transitions import move_run, move_ti, move_ti_reading

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


_READ_STATE = hot(  # the fused statement is cached by it: registered, as in the code
    "test: read a TI's state",
    select(TaskInstance.__table__.c.id, TaskInstance.__table__.c.state).where(
        TaskInstance.__table__.c.id == bindparam("x")
    ),
)


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


def test_a_move_and_a_read_share_one_statement(any_factory) -> None:
    """The read sees the TI as it was before the move; a lost move is None, a won move
    with nothing to read an empty list."""
    ti_id = _one_ti(any_factory)

    def move(session: Session, new: TI, expect: TI, x: int) -> list | None:
        return move_ti_reading(
            session, ti_id, new, expect=[expect], now=NOW, read=_READ_STATE, params={"x": x}
        )

    with transaction(any_factory) as session:
        rows = move(session, TI.SCHEDULED, TI.NONE, ti_id)
        assert [(r.id, r.state) for r in rows or []] == [(ti_id, "none")]
        assert move(session, TI.SCHEDULED, TI.NONE, ti_id) is None
        assert move(session, TI.QUEUED, TI.SCHEDULED, -1) == []
    with any_factory() as session:
        assert session.get(TaskInstance, ti_id).state == TI.QUEUED
