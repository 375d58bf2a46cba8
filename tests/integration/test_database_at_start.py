"""Daemons started before their database answers wait for it, as a user meets them.

`sluice scheduler`, `sluice worker` and `sluice api` started while the database is not
there print one line per attempt naming the host (never the password), back off as
`SLUICE_DB_RETRY_DELAY` and `SLUICE_DB_RETRY_MAX_DELAY` say, and go on when it answers:
a database created later (from a migrated template, in one statement), or a port where
something starts listening later.
"""

from __future__ import annotations

import contextlib
import re
import socket
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text

from tests.conftest import PG_ADMIN_URL, migrated_database
from tests.databases import drop_database
from tests.procs import Sluice, wait_until

PASSWORD = "pw-never-shown-7"

DAG = """
from sluice import DAG, task
with DAG("hello", schedule=None) as dag:
    @task
    def one():
        return 1
    @task
    def two():
        return 2
    one >> two
"""

RETRY_LINE = re.compile(
    r"WARNING (sluice\.[\w.]+): database at (\S+) unavailable \(attempt (\d+)\): (.+); "
    r"retrying in ([0-9.]+)s$"
)


def url_with_password(host_port: str, database: str) -> str:
    return f"postgresql+psycopg://postgres:{PASSWORD}@{host_port}/{database}"


def retry_lines(log: Path) -> list[re.Match[str]]:
    found = (RETRY_LINE.search(line) for line in log.read_text(errors="replace").splitlines())
    return [m for m in found if m]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def count(url: str, sql: str) -> int:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(text(sql)).scalar_one())
    finally:
        engine.dispose()


@pytest.fixture
def template_db(pg_admin: Engine) -> Iterator[str]:
    """The name of a migrated database to copy (no connection to it is left open)."""
    made = migrated_database(pg_admin)
    url = next(made)
    yield url.rsplit("/", 1)[1]
    with contextlib.suppress(StopIteration):
        next(made)


def runner(url: str, redis_url: str, tmp_path: Path) -> Sluice:
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "hello.py").write_text(DAG)
    logs = tmp_path / "logs"
    logs.mkdir()
    sluice = Sluice(url, redis_url, dags, logs)
    sluice.extra_env.update(SLUICE_DB_RETRY_DELAY="0.1", SLUICE_DB_RETRY_MAX_DELAY="0.4")
    return sluice


def test_scheduler_and_api_wait_for_a_database_created_later(
    pg_admin: Engine, template_db: str, redis_url: str, tmp_path: Path
) -> None:
    name = f"sluice_t_{uuid.uuid4().hex[:10]}"
    sluice = runner(url_with_password("127.0.0.1:5432", name), redis_url, tmp_path)
    api_port = free_port()
    try:
        scheduler = sluice.scheduler()
        sluice.start("api", "api", "--port", str(api_port))
        scheduler_log = sluice.log_dir / "scheduler-0.log"
        api_log = sluice.log_dir / "api-1.log"
        wait_until(lambda: len(retry_lines(scheduler_log)) >= 4, timeout=30)
        wait_until(lambda: len(retry_lines(api_log)) >= 2, timeout=30)
        lines = retry_lines(scheduler_log)
        assert [m[3] for m in lines[:4]] == ["1", "2", "3", "4"]
        assert [float(m[5]) for m in lines[:4]] == [0.1, 0.2, 0.4, 0.4]  # doubling, bounded
        for m in lines + retry_lines(api_log):
            assert m[2] == f"127.0.0.1:5432/{name}"
            assert m[4] == f'FATAL: database "{name}" does not exist'
        assert scheduler.poll() is None
        with pg_admin.connect() as conn:  # the database appears, migrated, at once
            conn.execute(text(f'CREATE DATABASE "{name}" TEMPLATE "{template_db}"'))
        url = sluice.database_url
        wait_until(lambda: count(url, "SELECT count(*) FROM job WHERE state = 'running'"), 30)
        wait_until(lambda: count(url, "SELECT count(*) FROM dag WHERE dag_id = 'hello'"), 30)
        answered = f"database at 127.0.0.1:5432/{name} answered (attempt "
        wait_until(lambda: answered in scheduler_log.read_text(), timeout=10)

        def health() -> int:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{api_port}/api/v1/dags") as r:
                    return int(r.status)
            except OSError:
                return 0

        assert wait_until(health, timeout=30) == 200
        sluice.stop(scheduler)
        assert scheduler.returncode == 0
        everything = sluice.logs()
        assert PASSWORD not in everything
        assert "Traceback" not in everything
    finally:
        sluice.stop_all()
        drop_database(pg_admin, name)


class Forwarder:
    """A TCP port that forwards every connection to PostgreSQL once `start` is called;
    until then nothing listens on it."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = free_port()
        self._server: socket.socket | None = None
        self._sockets: list[socket.socket] = []

    def start(self) -> None:
        server = socket.create_server(("127.0.0.1", self.port))
        self._server = server
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        assert self._server is not None
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            self._sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        for sock in [*self._sockets, *([self._server] if self._server else [])]:
            with contextlib.suppress(OSError):
                sock.close()


def test_worker_waits_for_a_port_that_starts_listening_later(
    pg_url: str, redis_url: str, tmp_path: Path
) -> None:
    admin = PG_ADMIN_URL.split("//", 1)[1].split("@", 1)[1].split("/", 1)[0]
    host, port = admin.split(":")
    forwarder = Forwarder((host, int(port)))
    database = pg_url.rsplit("/", 1)[1]
    sluice = runner(pg_url, redis_url, tmp_path)
    try:
        # the worker alone talks to the database through the forwarder
        worker_url = url_with_password(f"127.0.0.1:{forwarder.port}", database)
        sluice.extra_env["SLUICE_DATABASE_URL"] = worker_url
        worker = sluice.start("worker", "worker", "-c", "1", "--pool", "threads")
        del sluice.extra_env["SLUICE_DATABASE_URL"]
        log = sluice.log_dir / "worker-0.log"
        wait_until(lambda: len(retry_lines(log)) >= 3, timeout=30)
        for m in retry_lines(log):
            assert m[1] == "sluice.scheduler.core.db_wait"
            assert m[2] == f"127.0.0.1:{forwarder.port}/{database}"
            assert m[4] == "Connection refused"
        assert worker.poll() is None
        sluice.scheduler()
        forwarder.start()
        run_id = sluice.trigger("hello")
        assert sluice.wait_run("hello", run_id, timeout=60) == "success"
        everything = sluice.logs()
        assert PASSWORD not in everything
        assert "Traceback" not in everything
        sluice.stop(worker)
    finally:
        sluice.stop_all()
        forwarder.close()


def test_a_scheduler_whose_connections_are_cut_while_it_starts_goes_on(
    pg_url: str, redis_url: str, tmp_path: Path
) -> None:
    """A database that drops the scheduler's connections while it starts (a restart, an
    operator's pg_terminate_backend) costs it a retry line, not its life: every
    connection it opens in its first 3 s of database use is terminated, then a run of it
    finishes."""
    sluice = runner(pg_url, redis_url, tmp_path)
    try:
        scheduler = sluice.scheduler()
        killed = 0
        engine = create_engine(pg_url)
        try:
            with engine.connect() as conn:
                conn.execution_options(isolation_level="AUTOCOMMIT")
                # from its first connection (its start may take seconds on a busy
                # machine) for 3 s: every connection it opens is terminated
                first_kill: float | None = None
                give_up = time.monotonic() + 30
                while time.monotonic() < give_up:
                    killed += len(
                        conn.execute(
                            text(
                                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                                " WHERE datname = current_database()"
                                " AND application_name = 'sluice-scheduler'"
                            )
                        ).all()
                    )
                    if killed and first_kill is None:
                        first_kill = time.monotonic()
                    if first_kill is not None and time.monotonic() > first_kill + 3:
                        break
                    time.sleep(0.05)
        finally:
            engine.dispose()
        assert killed > 0
        assert scheduler.poll() is None, sluice.logs()
        sluice.worker()
        run_id = sluice.trigger("hello")
        assert sluice.wait_run("hello", run_id, timeout=60) == "success"
        assert scheduler.poll() is None
    finally:
        sluice.stop_all()
