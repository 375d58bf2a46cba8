"""A restarted Redis (all its messages lost) leaves no task lost, stuck or run twice.

The test runs a Redis server of its own on a free port, so it can kill and restart
it without touching the machine's Redis.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.test_ha import assert_all_once, trigger_many, write_fanout
from tests.procs import Sluice, wait_until
from tests.redis_server import REDIS_SERVER, OwnRedis


@pytest.fixture
def own_redis() -> Iterator[OwnRedis]:
    if REDIS_SERVER is None:
        pytest.skip("redis-server not installed")
    server = OwnRedis()
    server.start()
    yield server
    server.stop()


def test_restarted_redis_loses_no_task(sluice: Sluice, own_redis: OwnRedis, tmp_path: Path) -> None:
    sluice.broker_url = f"redis://127.0.0.1:{own_redis.port}/0"
    sluice.extra_env["SLUICE_QUEUED_TIMEOUT"] = "3"
    log = tmp_path / "exec.log"
    write_fanout(sluice, log, width=6, sleep=0.2)
    sluice.run("dags", "list")
    scheduler = sluice.scheduler()
    worker = sluice.worker(concurrency=2)
    runs = trigger_many(sluice, "fan", 4)
    wait_until(lambda: log.exists() and len(log.read_text().splitlines()) >= 4, timeout=60)

    # Redis dies with every queued message and comes back empty a few seconds later
    own_redis.kill()
    time.sleep(3)
    own_redis.start()

    for run_id in runs:
        assert sluice.wait_run("fan", run_id, timeout=120) == "success"
    assert_all_once(log, runs, ["start", "join", *[f"t{i}" for i in range(6)]])
    assert scheduler.poll() is None and worker.poll() is None
