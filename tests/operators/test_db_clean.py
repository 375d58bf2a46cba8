"""`sluice db clean --before DATE [--dry-run] [--yes]`, run as a user runs it, on
PostgreSQL and on SQLite: it lists the finished runs that ended before DATE, asks, and
deletes them with their task instances, logs, callbacks and audit events, in batches;
unfinished and newer runs stay whole, and so do runs whose callbacks are still to be
delivered."""

from __future__ import annotations

import datetime as dt
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import func, select

from sluice.scheduler.control import operations
from sluice.scheduler.control.retention import delete_expired
from sluice.scheduler.core.callback_kinds import Status
from sluice.scheduler.core.db import make_engine, transaction
from sluice.scheduler.core.messages import CallbackMessage
from sluice.scheduler.core.migrate import upgrade
from sluice.scheduler.core.models import (
    AuditEvent,
    DagRun,
    DueCallback,
    TaskInstance,
    TaskLog,
)
from sluice.scheduler.core.queries import callbacks as due
from sluice.scheduler.core.queries.task_logs import LogSnapshot, save_task_log
from sluice.scheduler.core.states import TI, DagRunState
from sluice.scheduler.core.transitions import move_run
from tests.operators.helpers import World
from tests.procs import run_sluice

PAIR = """
with DAG("pair", schedule=None) as dag:
    task(task_id="a")(lambda: 1) >> task(task_id="b")(lambda: 2)
"""
NOW = dt.datetime(2026, 6, 1, tzinfo=dt.UTC)


@pytest.fixture(params=["postgresql", "sqlite"])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[World]:
    if request.param == "postgresql":
        url = request.getfixturevalue("pg_url")
    else:
        url = f"sqlite:///{tmp_path / 'clean.db'}"
        engine = make_engine(url)
        upgrade(engine)
        engine.dispose()
    folder = tmp_path / "dags"
    folder.mkdir()
    w = World(url, folder)
    w.dags(PAIR)
    yield w
    w.close()


def finished_run(world: World, run_id: str, ended: dt.datetime) -> None:
    """A run of `pair` whose TIs succeeded (a log, a callback and a note beside them) and
    which ended at `ended`."""
    world.now = ended
    world.trigger("pair", run_id)
    for task_id in ("a", "b"):
        ti = world.advance("pair", run_id, task_id, TI.SUCCESS)
        with transaction(world.factory) as session:
            snapshot = LogSnapshot(ti.id, 1, ti.attempt_id, "host", "hello", 0, ended, ended)
            save_task_log(session, snapshot, now=ended)
    with transaction(world.factory) as session:
        run = session.scalar(select(DagRun).where(DagRun.run_id == run_id))
        assert run is not None
        assert move_run(
            session, run.id, DagRunState.SUCCESS, expect=[DagRunState.RUNNING], now=ended
        )
        session.add(
            DueCallback(
                dedup_key=f"k-{run_id}",
                kind="on_success",
                dag_id="pair",
                run_id=run_id,
                state="success",
                status="delivered",
            )
        )
        operations.note_on(session, run, None, f"note on {run_id}", who="test", now=ended)


def sluice(world: World, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    env.update(
        SLUICE_DATABASE_URL=world.settings.database_url,
        SLUICE_DAGS_FOLDER=str(world.folder),
        COLUMNS="80",
    )
    return run_sluice(*args, env=env, input_text=stdin, timeout=60)


def counts(world: World) -> dict[str, object]:
    with world.factory() as session:
        return {
            "runs": sorted(session.scalars(select(DagRun.run_id))),
            "tis": session.scalar(select(func.count()).select_from(TaskInstance)),
            "logs": session.scalar(select(func.count()).select_from(TaskLog)),
            "callbacks": sorted(session.scalars(select(DueCallback.run_id))),
            "notes": sorted(session.scalars(select(AuditEvent.run_id))),
        }


def test_clean_lists_asks_and_deletes_only_old_finished_runs(world: World) -> None:
    finished_run(world, "old", NOW - dt.timedelta(days=40))
    finished_run(world, "recent", NOW - dt.timedelta(days=2))
    world.now = NOW - dt.timedelta(days=60)
    world.trigger("pair", "still-running")  # started long ago, never finished
    before = counts(world)
    assert before["runs"] == ["old", "recent", "still-running"]

    cut = (NOW - dt.timedelta(days=10)).date().isoformat()
    dry = sluice(world, "db", "clean", "--before", cut, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert (
        "pair" in dry.stdout and "would delete 1 finished runs with 2 task instances" in dry.stdout
    )
    # at 80 columns the table shows the run's end whole: an older day with its date (UTC)
    assert re.search(r"^pair +1 +2 +2026-04-22 00:00:00 +2026-04-22 00:00:00$", dry.stdout, re.M)
    table = dry.stdout.split("times in UTC")[0].splitlines()
    assert "…" not in dry.stdout and max(len(line) for line in table) <= 80
    assert counts(world) == before

    refused = sluice(world, "db", "clean", "--before", cut)  # no terminal to ask at
    assert refused.returncode != 0
    assert "nothing deleted: pass --yes" in refused.stderr
    assert counts(world) == before

    done = sluice(world, "db", "clean", "--before", cut, "--yes")
    assert done.returncode == 0, done.stderr
    assert "deleted 1 runs with 2 task instances" in done.stdout
    assert counts(world) == {
        "runs": ["recent", "still-running"],
        "tis": 4,
        "logs": 2,
        "callbacks": ["recent"],
        "notes": ["recent"],
    }
    again = sluice(world, "db", "clean", "--before", cut, "--yes")
    assert again.returncode == 0 and "nothing to delete" in again.stdout


def test_bad_dates_are_one_line_and_delete_nothing(world: World) -> None:
    finished_run(world, "old", NOW - dt.timedelta(days=40))
    for bad in ("yesterday", "2026-13-01", ""):
        done = sluice(world, "db", "clean", "--before", bad, "--yes")
        assert done.returncode != 0
        assert "--before" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert counts(world)["runs"] == ["old"]


def test_batches_delete_everything_old(world: World) -> None:
    for i in range(7):
        finished_run(world, f"old{i}", NOW - dt.timedelta(days=30 + i))
    seen: list[int] = []
    deleted = delete_expired(world.factory, NOW, batch=3, progress=lambda d: seen.append(d.runs))
    assert (deleted.runs, deleted.task_instances) == (7, 14)
    assert seen == [3, 6, 7]
    assert counts(world)["runs"] == []


ALERTING = """
def alert(context):
    print("run failed:", context["run_id"])

with DAG("alerting", schedule=None, on_failure_callback=alert) as dag:
    task(task_id="a")(lambda: 1)
"""


def failed_run(world: World, run_id: str, ended: dt.datetime, delivery: str) -> None:
    """A run of `alerting` that failed at `ended`: the database records its due alert
    (pending), which is then taken as far as `delivery` by the callbacks' own functions."""
    world.now = ended
    world.trigger("alerting", run_id)
    world.advance("alerting", run_id, "a", TI.FAILED)
    with transaction(world.factory) as session:
        run = session.scalar(select(DagRun).where(DagRun.run_id == run_id))
        assert run is not None
        assert move_run(
            session, run.id, DagRunState.FAILED, expect=[DagRunState.RUNNING], now=ended
        )
    if delivery == Status.PENDING:
        return
    with transaction(world.factory) as session:
        (message,) = due.publish_due(
            session, ended, republish_after=1e6, heartbeat_timeout=1e6, max_attempts=1
        )
    if delivery == Status.QUEUED:
        return
    with transaction(world.factory) as session:
        assert due.claim(session, message, ended) is not None
    if delivery == Status.RUNNING:
        return
    error = None if delivery == Status.DELIVERED else "the alert raised"
    with transaction(world.factory) as session:
        done = due.finish(
            session, message, ended, error=error, attempts=1, max_attempts=1, retry_delay=1
        )
    assert done == delivery


def test_clean_keeps_the_runs_whose_alerts_have_not_been_sent(world: World) -> None:
    """Finding 4.6: `db clean` deleted callback rows not run yet, so the alert of a run that
    failed just before the cut was never sent. A finished run whose callbacks are pending,
    queued or running is kept whole, as an unfinished run is, until they are done; only
    delivered and failed callbacks go, with their runs."""
    world.dags(ALERTING, name="alerting")
    cut = NOW - dt.timedelta(days=10)
    for hours, status in enumerate(Status.ALL, start=1):
        failed_run(world, f"r-{status}", cut - dt.timedelta(hours=hours), status)
    with world.factory() as session:
        assert due.counts(session) == dict.fromkeys(Status.ALL, 1)

    dry = sluice(world, "db", "clean", "--before", cut.isoformat(), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "would delete 2 finished runs with 2 task instances" in dry.stdout
    assert "kept 3 finished runs whose callbacks are still to be delivered" in dry.stdout

    done = sluice(world, "db", "clean", "--before", cut.isoformat(), "--yes")

    assert done.returncode == 0, done.stderr
    assert "deleted 2 runs with 2 task instances" in done.stdout
    kept = ["r-pending", "r-queued", "r-running"]
    assert counts(world) == {
        "runs": kept,
        "tis": 3,
        "logs": 0,
        "callbacks": kept,
        "notes": [],
    }
    with world.factory() as session:
        assert due.counts(session) == {
            **dict.fromkeys(Status.ALL, 0),
            **dict.fromkeys(Status.UNFINISHED, 1),
        }

    # once their alerts are sent, the next clean takes them
    with transaction(world.factory) as session:
        due.publish_due(session, cut, republish_after=1e6, heartbeat_timeout=1e6, max_attempts=1)
        for row in session.scalars(select(DueCallback).where(DueCallback.status == "queued")):
            assert due.claim(session, CallbackMessage(row.id, str(row.token)), cut) is not None
        for row in session.scalars(select(DueCallback).where(DueCallback.status == "running")):
            message = CallbackMessage(row.id, str(row.token))
            delivery = due.finish(
                session, message, cut, error=None, attempts=1, max_attempts=1, retry_delay=1
            )
            assert delivery == Status.DELIVERED
    again = sluice(world, "db", "clean", "--before", cut.isoformat(), "--yes")
    assert again.returncode == 0 and "deleted 3 runs" in again.stdout, again.stdout
    assert counts(world)["runs"] == counts(world)["callbacks"] == []
