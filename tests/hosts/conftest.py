"""The `hosts` fixture: the hosts of one test, every process and link of them removed at
the end, and checked to be gone (the fixture fails the test's teardown if not)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest

from tests.conftest import _sluice_runner
from tests.hosts.hosts import Hosts
from tests.hosts.private_pg import PrivatePostgres
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
    yield from hosts_on(sluice, tmp_path / "hosts")


def hosts_on(sluice: Sluice, root: Path, **upstreams: tuple[str, int]) -> Iterator[Hosts]:
    """Hosts on `sluice`'s services (or the `upstreams` given), closed and checked after."""
    harness = Hosts(sluice, root, **upstreams)
    try:
        yield harness
    finally:
        closed_and_checked(harness)


@pytest.fixture
def private_pg() -> Iterator[PrivatePostgres]:
    """A PostgreSQL cluster of this test's own (initdb, pg_ctl, a free port), stopped and
    removed after: one the test may restart without touching the machine's."""
    cluster = PrivatePostgres.make()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.remove()


@pytest.fixture
def private_sluice(private_pg: PrivatePostgres, redis_url: str, tmp_path: Path) -> Iterator[Sluice]:
    """`sluice` on a migrated database of `private_pg` and the test's Redis db."""
    from sluice.scheduler.core.db import make_engine
    from sluice.scheduler.core.migrate import upgrade

    url = private_pg.create_database("sluice")
    engine = make_engine(url)
    try:
        upgrade(engine)
    finally:
        engine.dispose()
    for runner in _sluice_runner(url, redis_url, tmp_path):
        yield cast(Sluice, runner)


@pytest.fixture
def private_hosts(private_sluice: Sluice, tmp_path: Path) -> Iterator[Hosts]:
    yield from hosts_on(private_sluice, tmp_path / "hosts")
