"""Callbacks below the processes: the authoring options, the webhook's payload, and the
database side on SQLite (the trigger records a due callback once per TI, try and kind;
publish, claim and end move it by compare-and-set on its token; deadlines fire once)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from sluice import DAG, DagDefinitionError, Task, Webhook
from sluice.broker.worker.heartbeat import LOST_CALLBACK, Heartbeat
from sluice.scheduler.core.callback_kinds import Status
from sluice.scheduler.core.db import make_engine, make_session_factory, transaction
from sluice.scheduler.core.messages import CallbackMessage, MessageError
from sluice.scheduler.core.migrate import upgrade
from sluice.scheduler.core.models import Dag, DagRun, DueCallback, TaskInstance
from sluice.scheduler.core.queries import callbacks as due
from sluice.scheduler.core.states import TI, DagRunState, RunType
from sluice.scheduler.core.transitions import move_run, move_tis
from sluice.scheduler.scheduling.dagrun import create_dagrun
from sluice.tasks.serialize import serialize_dag, version_hash
from tests.procs import wait_until

NOW = dt.datetime(2026, 3, 1, 12, tzinfo=dt.UTC)


def record(context: dict[str, Any]) -> None:
    return None


def test_callback_options_are_checked_and_serialized() -> None:
    with pytest.raises(DagDefinitionError, match="on_failure_callback must be a callable"):
        DAG("d", on_failure_callback=3)  # type: ignore[arg-type]
    with pytest.raises(DagDefinitionError, match="on_deadline_missed needs a deadline"):
        DAG("d", on_deadline_missed=record)
    with DAG("d"), pytest.raises(DagDefinitionError, match="task 't': on_retry_callback"):
        Task("t", python_callable=record, on_retry_callback="")
    with DAG("plain") as plain:
        Task("t", python_callable=record)
    before = version_hash(serialize_dag(plain))
    assert "callbacks" not in serialize_dag(plain)
    with DAG(
        "plain",
        on_success_callback="app.notify",
        deadline=dt.timedelta(minutes=1),
        on_deadline_missed=record,
    ) as alerted:
        Task("t", python_callable=record, on_failure_callback=record, on_retry_callback=record)
    spec = serialize_dag(alerted)
    assert spec["callbacks"] == ["on_deadline_missed", "on_success"]
    assert spec["deadline"] == 60.0
    assert spec["tasks"]["t"]["callbacks"] == ["on_failure", "on_retry"]
    assert version_hash(spec) != before


def test_webhook_payload_is_slack_compatible() -> None:
    payload = Webhook().payload(
        {
            "dag_id": "etl",
            "run_id": "r1",
            "task_id": "load",
            "state": "failed",
            "kind": "on_failure",
            "error": "ValueError: boom",
            "url": "http://ui/dags/etl",
        }
    )
    assert payload["text"] == (
        "Sluice: etl r1: load failed (on_failure): ValueError: boom <http://ui/dags/etl>"
    )
    assert payload["dag_id"] == "etl" and payload["error"] == "ValueError: boom"


def test_callback_messages_are_checked() -> None:
    assert CallbackMessage.from_kwargs({"callback_id": 3, "token": "t"}) == CallbackMessage(3, "t")
    bads: list[dict[str, Any]] = [
        {"callback_id": "3", "token": "t"},
        {"callback_id": 3},
        {"callback_id": True, "token": "t"},
        {"callback_id": 3, "token": "t", "x": 1},
    ]
    for bad in bads:
        with pytest.raises(MessageError):
            CallbackMessage.from_kwargs(bad)


@pytest.fixture
def factory(tmp_path: Any) -> Iterator[sessionmaker[Session]]:
    engine = make_engine(f"sqlite:///{tmp_path / 'callbacks.db'}")
    upgrade(engine)
    yield make_session_factory(engine)
    engine.dispose()


SPEC: dict[str, Any] = {
    "dag_id": "d",
    "callbacks": ["on_deadline_missed", "on_failure"],
    "deadline": 60.0,
    "tasks": {
        "t": {
            "task_id": "t",
            "upstream": [],
            "downstream": [],
            "retries": 1,
            "callbacks": ["on_failure", "on_retry"],
        },
        "quiet": {"task_id": "quiet", "upstream": [], "downstream": []},
    },
}


def new_run(factory: sessionmaker[Session]) -> tuple[int, dict[str, int]]:
    with transaction(factory) as session:
        dag = Dag(dag_id="d", fileloc="/x.py", version_hash="h", serialized=SPEC)
        session.add(dag)
        session.flush()
        run = create_dagrun(session, dag, run_type=RunType.MANUAL, logical_date=NOW, now=NOW)
        tis = {t.task_id: t.id for t in session.scalars(select(TaskInstance))}
        return run.id, tis


def due_rows(factory: sessionmaker[Session]) -> list[tuple[Any, ...]]:
    with factory() as session:
        return [
            (r.kind, r.task_id, r.try_number, r.state, r.status)
            for r in session.scalars(select(DueCallback).order_by(DueCallback.id))
        ]


def test_a_state_write_records_its_callback_once(factory: sessionmaker[Session]) -> None:
    run_pk, tis = new_run(factory)
    with transaction(factory) as session:
        move_tis(session, list(tis.values()), TI.FAILED, expect=[TI.NONE], now=NOW)
        move_run(session, run_pk, DagRunState.FAILED, expect=[DagRunState.QUEUED], now=NOW)
    with transaction(factory) as session:  # marked success, then failed again: same try
        move_tis(session, [tis["t"]], TI.SUCCESS, expect=[TI.FAILED], now=NOW)
        move_tis(session, [tis["t"]], TI.FAILED, expect=[TI.SUCCESS], now=NOW)
    assert due_rows(factory) == [
        ("on_failure", "t", 0, "failed", "pending"),
        ("on_failure", None, 0, "failed", "pending"),
    ]


def test_publish_claim_and_end_move_by_token(factory: sessionmaker[Session]) -> None:
    _, tis = new_run(factory)
    with transaction(factory) as session:
        move_tis(session, [tis["t"]], TI.FAILED, expect=[TI.NONE], now=NOW)
    options: dict[str, Any] = {
        "republish_after": 10.0,
        "heartbeat_timeout": 60.0,
        "max_attempts": 2,
    }
    with transaction(factory) as session:
        [first] = due.publish_due(session, NOW, **options)
    with transaction(factory) as session:  # nothing else is due; not lost yet
        assert due.publish_due(session, NOW + dt.timedelta(seconds=5), **options) == []
    with transaction(factory) as session:  # lost: published again, a new token
        [again] = due.publish_due(session, NOW + dt.timedelta(seconds=11), **options)
    assert again.callback_id == first.callback_id and again.token != first.token
    with transaction(factory) as session:
        assert due.claim(session, first, NOW) is None  # the older message is stale
        row = due.claim(session, again, NOW)
        assert row is not None and row.status == Status.RUNNING
        assert due.claim(session, again, NOW) is None  # delivered twice: runs once
    ended: dict[str, Any] = {"attempts": 1, "max_attempts": 2, "retry_delay": 5.0}
    with transaction(factory) as session:
        assert due.finish(session, again, NOW, error="boom", **ended) == Status.PENDING
    with transaction(factory) as session:  # its backoff: not due before 5 s
        assert due.publish_due(session, NOW + dt.timedelta(seconds=4), **options) == []
        [third] = due.publish_due(session, NOW + dt.timedelta(seconds=5), **options)
        assert due.claim(session, third, NOW) is not None
        ended["attempts"] = 2
        assert due.finish(session, third, NOW, error="boom", **ended) == Status.FAILED
        assert due.finish(session, third, NOW, error=None, **ended) is None  # not running
    assert due_rows(factory) == [("on_failure", "t", 0, "failed", "failed")]


def test_a_callback_whose_worker_was_lost_runs_again(factory: sessionmaker[Session]) -> None:
    _, tis = new_run(factory)
    with transaction(factory) as session:
        move_tis(session, [tis["t"]], TI.FAILED, expect=[TI.NONE], now=NOW)
    options: dict[str, Any] = {
        "republish_after": 10.0,
        "heartbeat_timeout": 60.0,
        "max_attempts": 5,
    }
    with transaction(factory) as session:
        [message] = due.publish_due(session, NOW, **options)
        assert due.claim(session, message, NOW) is not None
    with transaction(factory) as session:
        assert due.publish_due(session, NOW + dt.timedelta(seconds=59), **options) == []
        [again] = due.publish_due(session, NOW + dt.timedelta(seconds=61), **options)
        row = session.get(DueCallback, again.callback_id)
        assert row is not None and row.attempts == 1 and "lost" in (row.error or "")


def test_a_running_callback_is_published_again_only_when_its_heartbeat_is_gone(
    factory: sessionmaker[Session],
) -> None:
    """Issue 39, 4.4: a callback whose worker beats for it is never published again,
    however long it runs (its worker ends it at its timeout), so it never runs twice at
    once; one whose beats stopped for the heartbeat timeout (its worker lost) is, with an
    attempt spent, and a beat on its old token finds it lost."""
    _, tis = new_run(factory)
    with transaction(factory) as session:
        move_tis(session, [tis["t"]], TI.FAILED, expect=[TI.NONE], now=NOW)
    options: dict[str, Any] = {
        "republish_after": 10.0,
        "heartbeat_timeout": 30.0,
        "max_attempts": 5,
    }
    with transaction(factory) as session:
        [message] = due.publish_due(session, NOW, **options)
        assert due.claim(session, message, NOW) is not None
    running = [(message.callback_id, message.token)]
    for beat in range(20, 400, 20):
        at = NOW + dt.timedelta(seconds=beat)
        with transaction(factory) as session:
            assert due.beat_callbacks(session, running, at) == {message.callback_id}
        with transaction(factory) as session:
            assert due.publish_due(session, at + dt.timedelta(seconds=19), **options) == []
    last = NOW + dt.timedelta(seconds=380)
    with transaction(factory) as session:
        assert due.publish_due(session, last + dt.timedelta(seconds=29), **options) == []
        [again] = due.publish_due(session, last + dt.timedelta(seconds=31), **options)
        row = session.get(DueCallback, again.callback_id)
        assert row is not None and row.attempts == 1
        assert row.error == "the worker running it was lost (no heartbeat for 30s)"
    with transaction(factory) as session:
        assert due.beat_callbacks(session, running, last + dt.timedelta(seconds=40)) == set()


def test_the_workers_heartbeat_beats_for_a_running_callback_and_stops_a_lost_one(
    factory: sessionmaker[Session],
) -> None:
    """Issue 39, 4.4: the worker's heartbeat thread beats for the callback it runs (on its
    token), and stops it when the schedulers took it back (published again)."""
    _, tis = new_run(factory)
    with transaction(factory) as session:
        move_tis(session, [tis["t"]], TI.FAILED, expect=[TI.NONE], now=NOW)
    options: dict[str, Any] = {
        "republish_after": 10.0,
        "heartbeat_timeout": 30.0,
        "max_attempts": 5,
    }
    with transaction(factory) as session:
        [message] = due.publish_due(session, NOW, **options)
        assert due.claim(session, message, NOW) is not None

    def last_beat() -> dt.datetime | None:
        with factory() as session:
            row = session.get(DueCallback, message.callback_id)
            assert row is not None
            return row.last_heartbeat_at

    lost: list[str] = []
    beats = Heartbeat.for_callback(factory, 0.05, message.callback_id, message.token, lost.append)
    with beats:
        wait_until(lambda: (last_beat() or NOW) > NOW, timeout=5)
        with transaction(factory) as session:  # its beats stop: lost, published again
            later = NOW + dt.timedelta(seconds=31)
            session.execute(update(DueCallback).values(last_heartbeat_at=NOW))
            [again] = due.publish_due(session, later, **options)
        wait_until(lambda: lost, timeout=5)
    assert lost == [LOST_CALLBACK] and again.token != message.token


def test_a_timed_out_callback_fails_at_once(factory: sessionmaker[Session]) -> None:
    """Issue 39, 4.4: a callback that ran past its timeout is `failed`, not run again (a
    second run would time out again, and the first may have half delivered)."""
    _, tis = new_run(factory)
    with transaction(factory) as session:
        move_tis(session, [tis["t"]], TI.FAILED, expect=[TI.NONE], now=NOW)
    options: dict[str, Any] = {
        "republish_after": 10.0,
        "heartbeat_timeout": 30.0,
        "max_attempts": 5,
    }
    with transaction(factory) as session:
        [message] = due.publish_due(session, NOW, **options)
        assert due.claim(session, message, NOW) is not None
    error = "TaskTimeout: callback on_failure of d timed out after 2s"
    ended: dict[str, Any] = {"attempts": 1, "max_attempts": 5, "retry_delay": 5.0}
    with transaction(factory) as session:
        assert due.finish(session, message, NOW, error=error, retry=False, **ended) == "failed"
    with transaction(factory) as session:
        assert due.publish_due(session, NOW + dt.timedelta(days=1), **options) == []
        row = session.get(DueCallback, message.callback_id)
        assert row is not None and (row.status, row.error) == (Status.FAILED, error)


def test_a_missed_deadline_fires_once(factory: sessionmaker[Session]) -> None:
    run_pk, _ = new_run(factory)
    with transaction(factory) as session:
        assert due.fire_deadlines(session, NOW + dt.timedelta(seconds=59)) == 0
        assert due.fire_deadlines(session, NOW + dt.timedelta(seconds=61)) == 1
        assert due.fire_deadlines(session, NOW + dt.timedelta(seconds=120)) == 0
        run = session.get(DagRun, run_pk)
        assert run is not None and run.deadline_at is None
    assert due_rows(factory) == [("on_deadline_missed", None, 0, "queued", "pending")]
