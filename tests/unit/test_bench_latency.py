"""bench/latency.py's parts without PostgreSQL: the delay proxy process against a local
echo server, the latency workloads' names as `--only` takes them, and their rows."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.latency import DelayProxy
from bench.report import rows_for
from bench.run import selected
from bench.sizes import LATENCY, WORKLOADS


@pytest.fixture
def echo() -> Iterator[tuple[str, int]]:
    """A TCP server on 127.0.0.1 that sends back what it reads, one connection at a time."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn, contextlib.suppress(ConnectionResetError):  # a client's reset
                while data := conn.recv(4096):
                    conn.sendall(data)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()
    stop.set()
    thread.join(timeout=5)
    server.close()


def _round_trip_ms(port: int, n: int = 5) -> float:
    """The median of `n` one-byte round trips through 127.0.0.1:`port`, ms."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            sock.sendall(b"x")
            assert sock.recv(1) == b"x"
            times.append((time.perf_counter() - t0) * 1000.0)
    return sorted(times)[n // 2]


def test_the_delay_proxy_adds_its_delay_to_each_round_trip(
    echo: tuple[str, int], tmp_path: Path
) -> None:
    proxy = DelayProxy(echo, tmp_path / "proxy.log")
    try:
        assert proxy.url("postgresql+psycopg://u:pw@db.example:5432/x") == (
            f"postgresql+psycopg://u:pw@127.0.0.1:{proxy.port}/x"
        )
        assert proxy.set_delay(0) == 0
        plain = _round_trip_ms(proxy.port)
        assert proxy.set_delay(40) == 1  # the connection above went through it
        delayed = _round_trip_ms(proxy.port)
        assert delayed >= 40
        assert delayed - plain < 40 + 200  # a loaded machine, not a stalled proxy
    finally:
        proxy.stop()
    assert proxy.popen.returncode == 0


def test_the_latency_workloads_are_chosen_by_name_in_any_case() -> None:
    assert set(LATENCY) <= set(WORKLOADS)
    assert selected("w1, W1+10MS,w2+0ms") == ["W1", "W1+10ms", "W2+0ms"]
    with pytest.raises(SystemExit):
        selected("W1+5ms")


def test_the_latency_rows_compare_with_plain_w1_and_w2() -> None:
    def figures(**values: float) -> dict[str, dict[str, float]]:
        return {"figures": values}

    results = {
        "workloads": {
            "W1": figures(tasks_per_s=100.0),
            "W2": figures(hop_median_ms=5.0),
            "W2+0ms": figures(hop_median_ms=6.0, hop_p95_ms=8.0, added_rtt_ms=0.5),
            "W2+10ms": figures(
                hop_median_ms=46.0,
                hop_p95_ms=60.0,
                added_rtt_ms=11.0,
                extra_ms_per_hop=40.0,
                round_trips_per_hop=4.0,
                round_trips_per_hop_measured_delay=40.0 / 10.5,
            ),
            "W1+10ms": figures(tasks_per_s=50.0, ratio_to_0ms_median=0.55),
        }
    }
    rows = {(r.workload, r.metric): r for r in rows_for(results)}
    hop = rows[("W2+10ms", "hop median, workers ↔ PostgreSQL +10 ms, ms")]
    assert (hop.value, hop.reference, hop.ratio) == (46.0, 5.0, 9.2)
    assert rows[("W2+10ms", "round trips a hop waits for (extra / delay)")].value == 4.0
    added = rows[("W2+10ms", "delay the proxy added to a SELECT 1, over its 0 ms one, ms")]
    assert added.value == 10.5
    w1 = rows[("W1+10ms", "fan-out, workers ↔ PostgreSQL +10 ms, tasks/s")]
    assert (w1.value, w1.reference, w1.ratio) == (50.0, 100.0, 0.5)
    assert rows[("W1+10ms", "tasks/s over the proxy's at 0 ms (paired rounds)")].value == 0.55
    assert all(not r.target for r in rows.values() if "+" in r.workload)  # no targets
