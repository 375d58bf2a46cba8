"""`sluice standalone` pointed at a database it should not take: a live deployment's (a
stray `SLUICE_DATABASE_URL`, or `--database-url`), or one it did not create whose schema
is not current. Either is refused with one line and exit 2, before anything is written:
no migration, no republished try, no run driven. Its own default SQLite database is
created, and upgraded later, as before."""

from __future__ import annotations

import re
import socket
import subprocess
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from sqlalchemy import Engine, create_engine, text

from sluice.scheduler.core.db import make_engine
from sluice.scheduler.core.migrate import HEAD, _config, current_revision, upgrade
from tests.databases import drop_database, pg_database_url
from tests.integration.test_cancel_run import rows
from tests.procs import Sluice, standalone, wait_until

HELD = """
import time
from pathlib import Path
from sluice import DAG, task

RELEASE = Path({release!r})


def hold():
    while not RELEASE.exists():
        time.sleep(0.05)
    return 1


with DAG("busy", schedule=None) as dag:
    task(task_id="first")(hold)
    task(task_id="second")(hold)
"""

ONE = """
from sluice import DAG, task

with DAG("one", schedule=None) as dag:
    task(task_id="only")(lambda: 1)
"""

WAY_OUT = "--database-url"


def state_of(url: str) -> dict[str, Any]:
    """What standalone must not change: the TIs (with their attempt and publish time), the
    runs (and who claims them), the jobs, the schema revision."""
    return {
        "tis": rows(
            url,
            "SELECT id, state, try_number, attempt_id, published_at, hostname, pid "
            "FROM task_instance ORDER BY id",
        ),
        "runs": rows(url, "SELECT id, run_id, state, claimed_by_job_id FROM dag_run ORDER BY id"),
        "jobs": rows(url, "SELECT id, job_type, state FROM job ORDER BY id"),
        "revision": rows(url, "SELECT version_num FROM alembic_version"),
    }


def refusal(done: subprocess.CompletedProcess[str]) -> str:
    """The one line a refused standalone printed (it exited 2, printed nothing else)."""
    assert done.returncode == 2, done.stdout + done.stderr[-3000:]
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def test_standalone_refuses_a_database_a_live_deployment_uses(
    sluice: Sluice, tmp_path: Path
) -> None:
    """Finding (security 2): a stray SLUICE_DATABASE_URL made standalone migrate a live
    deployment's database, publish its queued tries again, run them in its own process
    and drive its runs."""
    release = tmp_path / "release"
    (sluice.dags_folder / "busy.py").write_text(textwrap.dedent(HELD.format(release=str(release))))
    (sluice.dags_folder / "one.py").write_text(textwrap.dedent(ONE))
    sluice.extra_env["SLUICE_QUEUED_TIMEOUT"] = "3600"  # nobody publishes again meanwhile
    # Given a deployment: a scheduler, a worker running one try, the other try queued
    scheduler = sluice.scheduler()
    sluice.worker(concurrency=1)
    run_id = sluice.trigger("busy")
    url = sluice.database_url
    states = "SELECT state FROM task_instance ORDER BY state"
    wait_until(lambda: rows(url, states) == [("queued",), ("running",)], timeout=60)
    before = state_of(url)
    host = socket.gethostname()
    try:
        # When standalone is started on its database by SLUICE_DATABASE_URL
        done = standalone(tmp_path, sluice.dags_folder, url, "--trigger", "one")
        # Then it refuses, naming the scheduler and the way out
        line = refusal(done)
        assert re.search(rf"scheduler {re.escape(host)}:{scheduler.pid}, heartbeat \d+ s ago", line)
        assert WAY_OUT in line and "sluice.db" in line, line
        # and the scheduler alone gone, by --database-url, it names the worker's try
        sluice.stop(scheduler)
        ((worker_pid,),) = rows(url, "SELECT pid FROM task_instance WHERE state = 'running'")
        unused = tmp_path / "unused.db"
        done = standalone(tmp_path, sluice.dags_folder, f"sqlite:///{unused}", WAY_OUT, url)
        line = refusal(done)
        assert re.search(rf"worker {re.escape(host)}:{worker_pid}, heartbeat \d+ s ago", line)
        assert not unused.exists()
        # Nothing changed: no run created or driven, no try published again, no migration
        after = state_of(url)
        stopped = [(i, t, "success" if t == "scheduler" else s) for i, t, s in before["jobs"]]
        assert after == {**before, "jobs": stopped}  # the scheduler's own stop, alone
        assert rows(url, "SELECT run_id FROM dag_run") == [(run_id,)]
    finally:
        release.touch()


@pytest.fixture
def empty_pg_url(pg_admin: Engine) -> Iterator[str]:
    """A new PostgreSQL database with no schema; dropped afterwards."""
    name = f"sluice_t_{uuid.uuid4().hex[:10]}"
    with pg_admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield pg_database_url(name)
    finally:
        drop_database(pg_admin, name)


def migrate_to(url: str, revision: str) -> None:
    engine = make_engine(url)
    try:
        config = _config()
        with engine.begin() as connection:
            config.attributes["connection"] = connection
            command.upgrade(config, revision)
    finally:
        engine.dispose()


def revision_of(url: str) -> str | None:
    engine = make_engine(url)
    try:
        return current_revision(engine)
    finally:
        engine.dispose()


def test_standalone_never_migrates_a_database_it_did_not_create(
    empty_pg_url: str, tmp_path: Path
) -> None:
    """Finding (security 2): standalone migrated whatever database it was pointed at."""
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "one.py").write_text(textwrap.dedent(ONE))
    # Given a PostgreSQL database with no schema, standalone refuses and leaves it so
    line = refusal(standalone(tmp_path, dags, empty_pg_url, "--trigger", "one"))
    assert "no schema" in line and "sluice db migrate" in line, line
    assert revision_of(empty_pg_url) is None
    # Given one at an older revision, standalone refuses and leaves it at that revision
    migrate_to(empty_pg_url, "0013")
    line = refusal(standalone(tmp_path, dags, empty_pg_url, "--trigger", "one"))
    assert "revision 0013" in line and "sluice db migrate" in line, line
    assert revision_of(empty_pg_url) == "0013"
    # and so for a SQLite file it did not make (`sluice db migrate` made it, or anyone)
    made = tmp_path / "made.db"
    migrate_to(f"sqlite:///{made}", "0013")
    line = refusal(standalone(tmp_path, dags, f"sqlite:///{made}", "--trigger", "one"))
    assert "sluice db migrate" in line, line
    assert revision_of(f"sqlite:///{made}") == "0013"
    empty = tmp_path / "empty.db"
    empty.touch()
    line = refusal(standalone(tmp_path, dags, f"sqlite:///{empty}", "--trigger", "one"))
    assert "no schema" in line, line
    assert rows(f"sqlite:///{empty}", "SELECT name FROM sqlite_master") == []


def test_standalone_upgrades_the_sqlite_database_it_created(tmp_path: Path) -> None:
    # Given a SQLite database standalone created, left at an older revision (an older
    # Sluice made it)
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "one.py").write_text(textwrap.dedent(ONE))
    url = f"sqlite:///{tmp_path / 'own.db'}"
    assert standalone(tmp_path, dags, url, "--trigger", "one").returncode == 0
    engine = create_engine(url)  # SQLite's foreign keys off, as the downgrade needs
    try:
        config = _config()
        with engine.begin() as connection:
            config.attributes["connection"] = connection
            command.downgrade(config, "0013")
    finally:
        engine.dispose()
    assert revision_of(url) == "0013"
    # When standalone starts on it again, it upgrades it and runs
    done = standalone(tmp_path, dags, url, "--trigger", "one")
    assert done.returncode == 0, done.stderr[-3000:]
    assert revision_of(url) == HEAD
    # and a database `sluice db migrate` made at the head is used as it is
    other = f"sqlite:///{tmp_path / 'migrated.db'}"
    upgrade_engine = make_engine(other)
    try:
        upgrade(upgrade_engine)
    finally:
        upgrade_engine.dispose()
    assert standalone(tmp_path, dags, other, "--trigger", "one").returncode == 0
