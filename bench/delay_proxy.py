"""`python -m bench.delay_proxy HOST PORT`: a TCP proxy to PostgreSQL that adds a delay
to every round trip, in a process of its own, for the latency workloads (`bench.latency`).

tc netem is not available on the bench's machine, so a cross-zone link is emulated by
`tests.hosts.proxy.Link` (asyncio, one thread): every chunk waits `ms / 2` on each way,
in order, as on a longer wire. It runs in its own process (and session), so that its
CPU is counted apart from the bench's and never holds the bench's GIL.

Protocol, one line each way on stdin/stdout: the process prints `port N` (where it
listens on 127.0.0.1) once; then each line read on stdin is a delay in milliseconds per
round trip, answered with `delay MS ACCEPTED` (the connections accepted so far) once set.
It ends when stdin closes.
"""

from __future__ import annotations

import sys

from tests.hosts.proxy import Proxies


def main(argv: list[str]) -> int:
    host, port = argv[0], int(argv[1])
    proxies = Proxies()
    try:
        link = proxies.link("postgresql", (host, port))
        print(f"port {link.port}", flush=True)
        for line in sys.stdin:
            if not line.strip():
                continue
            ms = float(line)
            link.delay(ms)
            print(f"delay {ms:g} {link.stats.accepted}", flush=True)
    finally:
        proxies.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
