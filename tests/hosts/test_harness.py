"""The harness itself: what each rule of a link does to a connection, that a host's links
are its own, and that the harness removes everything it made, a failing test or not."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import make_url

from tests.hosts.conftest import closed_and_checked
from tests.hosts.hosts import Hosts, via_pg
from tests.hosts.proxy import LOCALHOST, Link, Proxies
from tests.procs import Sluice, wait_until


class Echo:
    """A TCP echo server of the test's own, one thread per connection."""

    def __init__(self) -> None:
        self.sock = socket.create_server((LOCALHOST, 0))
        self.port = int(self.sock.getsockname()[1])
        self.threads: list[threading.Thread] = []
        self.accepting = threading.Thread(target=self._accept, name="echo", daemon=True)
        self.accepting.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            thread = threading.Thread(target=self._echo, args=(conn,), daemon=True)
            self.threads.append(thread)
            thread.start()

    @staticmethod
    def _echo(conn: socket.socket) -> None:
        with conn:
            while True:
                try:
                    data = conn.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                conn.sendall(data)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        self.sock.close()
        self.accepting.join(timeout=5)


@pytest.fixture
def echo() -> Iterator[Echo]:
    server = Echo()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def proxies() -> Iterator[Proxies]:
    made = Proxies()
    try:
        yield made
    finally:
        made.close()
        assert not made.thread.is_alive()


def connect(link: Link) -> socket.socket:
    sock = socket.create_connection((LOCALHOST, link.port), timeout=5)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def round_trip(sock: socket.socket, data: bytes = b"ping") -> float:
    """Seconds for `data` to come back."""
    began = time.monotonic()
    sock.sendall(data)
    got = b""
    while len(got) < len(data):
        chunk = sock.recv(65536)
        assert chunk, "the connection closed"
        got += chunk
    assert got == data
    return time.monotonic() - began


def is_reset(sock: socket.socket) -> bool:
    """Whether the connection is gone (reset or closed) when used."""
    try:
        sock.sendall(b"x")
        return sock.recv(10) == b""
    except (ConnectionError, TimeoutError, OSError):
        return True


def refused(link: Link) -> bool:
    """Whether a new connection through `link` is reset (at once, or when first used)."""
    try:
        sock = connect(link)
    except ConnectionError:
        return True
    with sock:
        return is_reset(sock)


def test_open_link_forwards_both_ways(proxies: Proxies, echo: Echo) -> None:
    link = proxies.link("h/echo", (LOCALHOST, echo.port))
    with connect(link) as sock:
        assert round_trip(sock) < 0.1
        big = bytes(range(256)) * 4096  # 1 MiB, many chunks, in order
        assert round_trip(sock, big) < 5
    assert link.stats.accepted == 1


def test_delay_adds_to_each_round_trip(proxies: Proxies, echo: Echo) -> None:
    link = proxies.link("h/echo", (LOCALHOST, echo.port))
    with connect(link) as sock:
        link.delay(200)
        assert 0.19 <= round_trip(sock) < 0.5
        link.restore()
        assert round_trip(sock) < 0.1


def test_loss_stalls_a_share_of_chunks_as_a_retransmission(proxies: Proxies, echo: Echo) -> None:
    link = proxies.link("h/echo", (LOCALHOST, echo.port))
    with connect(link) as sock:
        link.loss(1.0, stall_ms=150)  # every chunk "lost" once: 150 ms each way
        assert 0.29 <= round_trip(sock) < 0.7
        link.loss(0.05)
        times = [round_trip(sock) for _ in range(60)]
    stalled = [t for t in times if t >= 0.19]
    assert 0 < len(stalled) <= 20, times  # about one round trip in ten (two chunks each)
    assert all(t < 0.1 or t >= 0.19 for t in times), "a chunk neither on time nor stalled"


def test_hold_forwards_nothing_until_restored(proxies: Proxies, echo: Echo) -> None:
    link = proxies.link("h/echo", (LOCALHOST, echo.port))
    with connect(link) as opened:
        round_trip(opened)
        link.hold()
        opened.sendall(b"held")
        opened.settimeout(0.5)
        with pytest.raises(TimeoutError):
            opened.recv(10)
        with connect(link) as new:  # accepted, but nothing through it
            new.sendall(b"new")
            new.settimeout(0.5)
            with pytest.raises(TimeoutError):
                new.recv(10)
            link.restore()
            new.settimeout(5)
            assert new.recv(10) == b"new"
        opened.settimeout(5)
        assert opened.recv(10) == b"held"  # what was sent while held goes on


def test_hold_after_a_pattern_lets_it_through_then_holds(proxies: Proxies, echo: Echo) -> None:
    link = proxies.link("h/echo", (LOCALHOST, echo.port))
    with connect(link) as sock:
        link.hold_after(b"LOCK")
        assert round_trip(sock, b"select") < 0.1
        sock.sendall(b"the LOCK statement")  # goes up; its answer is held
        link.wait_held(timeout=5)
        sock.settimeout(0.5)
        with pytest.raises(TimeoutError):
            sock.recv(100)
        link.restore()
        sock.settimeout(5)
        assert sock.recv(100) == b"the LOCK statement"
        assert round_trip(sock, b"LOCK again") < 0.1  # disarmed once it held


def test_cut_resets_open_and_new_connections_until_restored(proxies: Proxies, echo: Echo) -> None:
    link = proxies.link("h/echo", (LOCALHOST, echo.port))
    with connect(link) as opened:
        round_trip(opened)
        link.cut()
        assert is_reset(opened)
    assert refused(link)
    assert link.open_connections == 0 and link.stats.reset >= 2
    link.restore()
    with connect(link) as again:
        assert round_trip(again) < 0.1


def test_cut_of_a_stopped_service_refuses_through_the_link(proxies: Proxies) -> None:
    """The upstream down: a connection through the link is reset, as the service's own
    refusal would end it."""
    server = socket.create_server((LOCALHOST, 0))
    port = server.getsockname()[1]
    server.close()
    link = proxies.link("h/down", (LOCALHOST, port))
    assert refused(link)


def test_postgresql_through_a_link(proxies: Proxies, pg_url: str) -> None:
    url = make_url(pg_url)
    link = proxies.link("h/pg", (url.host or LOCALHOST, url.port or 5432))
    dsn = via_pg(pg_url, link).replace("postgresql+psycopg", "postgresql")
    with psycopg.connect(dsn, connect_timeout=5, autocommit=True) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
        link.delay(100)
        began = time.monotonic()
        conn.execute("SELECT 1")
        assert time.monotonic() - began >= 0.095
        link.cut()
        with pytest.raises(psycopg.OperationalError):
            conn.execute("SELECT 1")
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(dsn, connect_timeout=5)
    link.restore()
    with psycopg.connect(dsn, connect_timeout=5) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_a_hosts_links_are_its_own(hosts: Hosts, sluice: Sluice) -> None:
    """Two schedulers: one cut from PostgreSQL stops heartbeating, the other goes on."""
    sluice.run("dags", "list")
    cut = hosts.scheduler("s1")
    kept = hosts.scheduler("s2")

    def beats() -> dict[int, object]:
        rows = _query(sluice, "SELECT pid, latest_heartbeat FROM job WHERE state = 'running'")
        return dict(rows)

    wait_until(lambda: {cut.pid, kept.pid} <= set(beats()), timeout=30)
    cut.pg.cut()
    before = beats()
    time.sleep(2.0)
    after = beats()
    assert after[kept.pid] != before[kept.pid], "the other scheduler stopped heartbeating"
    assert after.get(cut.pid) == before[cut.pid], "the cut scheduler still heartbeats"
    assert cut.pg.stats.reset >= 1 and kept.pg.stats.reset == 0
    cut.pg.restore()
    wait_until(lambda: beats().get(cut.pid) != before[cut.pid], timeout=30)


def test_harness_removes_what_it_made_when_the_test_fails(sluice: Sluice, tmp_path: Path) -> None:
    """A test that fails with hosts running, links cut and connections open: the harness
    closes every listener, connection and thread, and every host's process group."""
    sluice.run("dags", "list")
    harness = Hosts(sluice, tmp_path / "hosts")
    with pytest.raises(RuntimeError, match="the test failed"), harness:
        worker = harness.worker("w1")
        scheduler = harness.scheduler("s1")
        wait_until(lambda: worker.pg.open_connections and scheduler.pg.open_connections)
        wait_until(lambda: worker.broker.open_connections, timeout=30)
        scheduler.broker.hold()
        worker.pg.cut()
        ports = [link.port for link in harness.proxies.made]
        pids = [worker.pid, scheduler.pid]
        raise RuntimeError("the test failed")
    assert len(ports) == 4 and len(set(ports)) == 4
    assert harness.leftovers() == []
    for port in ports:
        with pytest.raises(ConnectionRefusedError), socket.socket() as sock:
            sock.connect((LOCALHOST, port))
    assert not harness.proxies.thread.is_alive()
    assert not any(t.name == harness.proxies.thread.name for t in threading.enumerate())
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.killpg(pid, 0)
    closed_and_checked(harness)  # what the `hosts` fixture runs: closing twice is harmless


def _query(sluice: Sluice, sql: str) -> list[tuple]:
    from sqlalchemy import create_engine, text
    from sqlalchemy.pool import NullPool

    engine = create_engine(sluice.database_url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(text(sql)).all()]
    finally:
        engine.dispose()
