"""The embedded broker of `sluice standalone`: memory:// and a threads-pool worker in this
process run published TaskInstances through the same task as a real worker."""

from __future__ import annotations

import datetime as dt
import json
import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, select, text
from sqlalchemy.orm import Session, sessionmaker

from sluice.broker.publisher import publish
from sluice.broker.wakeup import LocalWaker, waker_for
from sluice.broker.worker.embedded import EmbeddedBroker
from sluice.scheduler.core.db import make_engine, make_session_factory, transaction, utcnow
from sluice.scheduler.core.messages import RunMessage
from sluice.scheduler.core.migrate import upgrade
from sluice.scheduler.core.models import Dag, DagRun, TaskInstance
from sluice.scheduler.core.settings import Settings
from sluice.scheduler.core.states import TI, RunType
from sluice.scheduler.core.transitions import move_ti
from tests.databases import drop_database, pg_database_url

DAG_ID = "embedded_test"

DAG_FILE = """
import threading

from sluice import DAG, Task


def first(context):
    return {"thread": threading.current_thread().name}


def second(context):
    return {"got": context["upstream"]["first"], "try": context["try_number"]}


with DAG("embedded_test") as dag:
    Task("first", python_callable=first) >> Task("second", python_callable=second)
"""


def _spec(task_id: str, upstream: list[str], downstream: list[str]) -> dict[str, object]:
    return {
        "task_id": task_id,
        "kind": "python",
        "upstream": upstream,
        "downstream": downstream,
        "trigger_rule": "all_success",
        "retries": 0,
        "retry_delay": 300.0,
        "retry_exponential_backoff": False,
        "max_retry_delay": None,
        "execution_timeout": None,
        "queue": "default",
        "pool": None,
        "pool_slots": 1,
        "priority_weight": 1,
        "is_branch": False,
    }


@pytest.fixture(scope="module")
def pg_database(pg_admin: Engine) -> Iterator[str]:
    name = f"sluice_b_embedded_{uuid.uuid4().hex[:8]}"
    with pg_admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield pg_database_url(name)
    finally:
        drop_database(pg_admin, name)


@pytest.fixture(params=["postgresql", "sqlite"])
def database_url(request, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'sluice.db'}"
    url: str = request.getfixturevalue("pg_database")
    return url


def setup_run(factory: sessionmaker[Session], folder: Path) -> dict[str, int]:
    """The DAG file, its Dag row, one running DagRun and its two TIs (state none)."""
    path = folder / "embedded_test_dag.py"
    path.write_text(DAG_FILE)
    serialized = {
        "dag_id": DAG_ID,
        "fileloc": str(path),
        "tasks": {
            "first": _spec("first", [], ["second"]),
            "second": _spec("second", ["first"], []),
        },
    }
    run_id = f"manual__{uuid.uuid4().hex[:8]}"
    with transaction(factory) as session:
        if session.get(Dag, DAG_ID) is None:
            session.add(
                Dag(dag_id=DAG_ID, fileloc=str(path), version_hash="v1", serialized=serialized)
            )
        run = DagRun(
            dag_id=DAG_ID,
            run_id=run_id,
            run_type=RunType.MANUAL,
            dag_hash="v1",
            logical_date=dt.datetime(2024, 5, 1, tzinfo=dt.UTC)
            + dt.timedelta(seconds=uuid.uuid4().int % 10**8),
        )
        session.add(run)
        session.flush()
        tis = [
            TaskInstance(dag_run_id=run.id, dag_id=DAG_ID, run_id=run_id, task_id=t)
            for t in ("first", "second")
        ]
        session.add_all(tis)
        session.flush()
        return {ti.task_id: ti.id for ti in tis}


def queue(factory: sessionmaker[Session], ti_id: int, task_id: str) -> RunMessage:
    """none -> scheduled -> queued with a fresh attempt_id (committed before publishing)."""
    attempt_id = str(uuid.uuid4())
    with transaction(factory) as session:
        now = utcnow()
        assert move_ti(session, ti_id, TI.SCHEDULED, expect=[TI.NONE], now=now)
        assert move_ti(
            session,
            ti_id,
            TI.QUEUED,
            expect=[TI.SCHEDULED],
            now=now,
            values={"attempt_id": attempt_id, "try_number": 1},
        )
        ti = session.get(TaskInstance, ti_id)
        assert ti is not None
        run_id = ti.run_id
    return RunMessage(
        ti_id=ti_id,
        attempt_id=attempt_id,
        dag_id=DAG_ID,
        run_id=run_id,
        task_id=task_id,
        try_number=1,
        queue="default",
    )


def ti_of(factory: sessionmaker[Session], ti_id: int) -> TaskInstance:
    with transaction(factory) as session:
        return session.scalars(select(TaskInstance).where(TaskInstance.id == ti_id)).one()


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


def test_embedded_broker_runs_published_tis(database_url: str, tmp_path: Path) -> None:
    # Given a migrated database, a queued TI and an embedded broker on its own namespace
    engine = make_engine(database_url)
    upgrade(engine)
    factory = make_session_factory(engine)
    ids = setup_run(factory, tmp_path)
    settings = Settings(
        database_url=database_url, namespace=f"emb{uuid.uuid4().hex[:8]}", embedded_broker=True
    )
    scheduler_waker = waker_for(settings)
    assert isinstance(scheduler_waker, LocalWaker)
    embedded = EmbeddedBroker(settings, session_factory=factory)
    embedded.start(["default"], concurrency=2)
    try:
        # When the first TI is published, and then the second once the first is done
        publish(embedded.app, [queue(factory, ids["first"], "first")])
        assert scheduler_waker.wait(10), "the worker did not wake the scheduler"
        wait_until(lambda: ti_of(factory, ids["first"]).state == TI.SUCCESS, 10, "first")
        publish(embedded.app, [queue(factory, ids["second"], "second")])
        wait_until(lambda: ti_of(factory, ids["second"]).state == TI.SUCCESS, 10, "second")

        # Then both ran in this process, in worker threads, with the upstream result passed on
        first = ti_of_result(factory, ids["first"])
        assert first["thread"] != "MainThread"
        assert ti_of_result(factory, ids["second"]) == {"got": first, "try": 1}
        assert ti_of(factory, ids["second"]).pid == os.getpid()
    finally:
        embedded.stop()
        engine.dispose()


def ti_of_result(factory: sessionmaker[Session], ti_id: int) -> dict[str, object]:
    result = ti_of(factory, ti_id).result
    assert result is not None
    decoded: dict[str, object] = json.loads(result)
    return decoded
