"""`sluice scheduler --metrics-port P` serves on 127.0.0.1 unless `--metrics-host` says
otherwise: metrics are not offered to the whole network by default."""

from __future__ import annotations

import socket
import urllib.request

from tests.procs import Sluice, wait_until


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def listening_on(port: int) -> set[str]:
    """The IPv4 addresses a socket listens on at `port` (from /proc/net/tcp, state 0A)."""
    found = set()
    with open("/proc/net/tcp") as table:
        for line in list(table)[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:
                found.add(socket.inet_ntoa(bytes.fromhex(address)[::-1]))
    return found


def test_metrics_listen_on_localhost_by_default_and_where_asked(sluice: Sluice) -> None:
    sluice.ok("db", "migrate")
    port = free_port()
    default = sluice.start("scheduler", "scheduler", "--metrics-port", str(port))
    try:
        wait_until(lambda: listening_on(port), timeout=30)
        assert listening_on(port) == {"127.0.0.1"}
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as page:
            assert b"sluice_scheduler" in page.read()
    finally:
        sluice.stop(default)
    wait_until(lambda: not listening_on(port), timeout=10)
    everywhere = sluice.start(
        "scheduler", "scheduler", "--metrics-port", str(port), "--metrics-host", "0.0.0.0"
    )
    try:
        wait_until(lambda: listening_on(port), timeout=30)
        assert listening_on(port) == {"0.0.0.0"}
    finally:
        sluice.stop(everywhere)
