"""The `hosts` fixture: the hosts of one test, every process and link of them removed at
the end, and checked to be gone (the fixture fails the test's teardown if not)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hosts.hosts import Hosts
from tests.procs import Sluice


def closed_and_checked(harness: Hosts) -> None:
    """Close `harness`, list what it made and fail if anything of it is left."""
    try:
        harness.close()
    finally:
        made = [repr(link) for link in harness.proxies.made]
        made += [f"host {h.name} pid {h.proc.pid}" for h in harness.made if h.proc is not None]
        left = harness.leftovers()
        print(f"hosts harness made: {made}; left after close: {left}")
    assert not left, f"the harness left {left}"


@pytest.fixture
def hosts(sluice: Sluice, tmp_path: Path) -> Iterator[Hosts]:
    """Hosts on the test's database and Redis db (`sluice`), their tries under
    `tmp_path/hosts/<host>/tries.log`."""
    harness = Hosts(sluice, tmp_path / "hosts")
    try:
        yield harness
    finally:
        closed_and_checked(harness)
