"""Shared fixtures: a fresh PostgreSQL database and Redis db per test, and process helpers.

Real services only. Locally a missing service skips the tests that need it
(with the reason); under CI=true it fails them. Redis is the tests' own: each pytest
process runs a `redis-server` of its own on a free port (`tests.redis_server`), so the
tests never read or flush the machine's Redis.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from typing import NoReturn

import kombu.pools
import pytest
import redis
from celery import Celery
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.exc import OperationalError

from bench.procs import compile_sources
from tests import forkserver
from tests.databases import PG_ADMIN_URL, POOL
from tests.redis_server import session_redis, stop_session_redis

IN_CI = os.environ.get("CI") == "true"


def pytest_sessionstart(session: pytest.Session) -> None:
    """Compile Sluice's modules to bytecode once, before any test starts a process
    (`bench.procs.compile_sources`): where the environment sets PYTHONDONTWRITEBYTECODE,
    every `sluice` subprocess (hundreds in the suite) would compile them all again, about
    0.3 s of CPU for a scheduler or worker, 0.1 s for a CLI call, on a suite whose time is
    CPU. Up-to-date files are only looked at."""
    compile_sources()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests marked `long` first: a worker starts them at once, and the others
    share the rest, instead of one long test running alone at the end."""
    items.sort(key=lambda item: item.get_closest_marker("long") is None)


RESERVED_REDIS_DBS = frozenset({14, 15})
"""Dbs of the tests' Redis no fixture gives out: 14 and 15 (the benchmark's)."""

_redis_dbs = itertools.cycle([db for db in range(16) if db not in RESERVED_REDIS_DBS])


def _unavailable(reason: str) -> NoReturn:
    if IN_CI:
        pytest.fail(f"{reason} (required under CI=true)")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def pg_admin():
    engine = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except OperationalError as exc:
        _unavailable(f"PostgreSQL not reachable at {PG_ADMIN_URL}: {exc.orig}")
    yield engine
    engine.dispose()


@pytest.fixture
def pg_url(pg_admin) -> Iterator[str]:
    """A new, migrated PostgreSQL database for this test; dropped afterwards."""
    yield from migrated_database(pg_admin)


def migrated_database(pg_admin: Engine) -> Iterator[str]:
    """The URL of a migrated PostgreSQL database of the test's own, emptied for the next
    test (or dropped) when resumed (`tests.databases`)."""
    yield from POOL.take(pg_admin)


@pytest.fixture
def redis_url() -> Iterator[str]:
    """A Redis db number of its own for this test, flushed before and after."""
    try:
        server = session_redis()
    except RuntimeError as exc:
        _unavailable(str(exc))
    db = next(_redis_dbs)
    client = redis.Redis(port=server.port, db=db)
    client.flushdb()
    yield server.url(db)
    client.flushdb()
    client.close()


def close_celery_app(app: Celery) -> None:
    """Close a test's Celery app and forget kombu's pools.

    kombu keeps one connection pool per broker URL for the whole process, shared by
    every app on that URL: a pool closed here would be handed, closed, to a later
    test's app on the same Redis db ("Acquire on closed pool")."""
    app.close()
    kombu.pools.reset()


def pytest_unconfigure(config: pytest.Config) -> None:
    forkserver.SERVER.stop()
    stop_session_redis()
    POOL.close()


AMQP_HOST = os.environ.get("SLUICE_TEST_AMQP_HOST", "127.0.0.1")


def rabbitmqctl(*args: str) -> str:
    """`rabbitmqctl -q ARGS`; its output (an error raises)."""
    done = subprocess.run(
        ["rabbitmqctl", "-q", *args], check=True, capture_output=True, text=True, timeout=60
    )
    return done.stdout


@pytest.fixture
def amqp_url() -> Iterator[str]:
    """A RabbitMQ vhost of its own for this test (guest may use it), deleted after."""
    if shutil.which("rabbitmqctl") is None:
        _unavailable("RabbitMQ's rabbitmqctl is not installed")
    vhost = f"sluice_t_{uuid.uuid4().hex[:10]}"
    try:
        rabbitmqctl("add_vhost", vhost)
        rabbitmqctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        _unavailable(f"RabbitMQ not usable at {AMQP_HOST}:5672: {exc}")
    yield f"amqp://guest:guest@{AMQP_HOST}:5672/{vhost}"
    rabbitmqctl("delete_vhost", vhost)


@pytest.fixture
def sluice_on_rabbitmq(pg_url, amqp_url, tmp_path) -> Iterator[object]:
    """The `sluice` fixture with RabbitMQ as the broker (its own vhost)."""
    yield from _sluice_runner(pg_url, amqp_url, tmp_path)


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    from sluice.scheduler.core.db import make_engine
    from sluice.scheduler.core.migrate import upgrade

    url = f"sqlite:///{tmp_path / 'sluice.db'}"
    engine = make_engine(url)
    upgrade(engine)
    engine.dispose()
    return url


@pytest.fixture
def sluice(pg_url, redis_url, tmp_path) -> Iterator[object]:
    """`sluice` commands against this test's PostgreSQL database, Redis db and DAGs folder."""
    yield from _sluice_runner(pg_url, redis_url, tmp_path)


def _sluice_runner(database_url: str, broker_url: str, tmp_path) -> Iterator[object]:
    """A `tests.procs.Sluice` with its DAGs and logs folders; its processes killed after."""
    from tests.procs import Sluice

    dags = tmp_path / "dags"
    dags.mkdir()
    logs = tmp_path / "logs"
    logs.mkdir()
    runner = Sluice(database_url, broker_url, dags, logs)
    yield runner
    runner.kill_all()
