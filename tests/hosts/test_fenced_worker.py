"""A worker cut off from PostgreSQL while its task runs (issue 46): it stops the try
itself (self-fencing, `broker.worker.heartbeat`) before the schedulers' sweep may hand it
to another worker, records nothing for it when the link is back, and serves on.

Settings: `tests.procs.Sluice` (heartbeat interval 0.5 s, timeout 5 s: the fence acts
after 2.5 s without a beat, the sweep after 5 s). The body writes `start`, then `end`
or, when it is stopped, `cut` (in the `tests.hosts.dag` line format, so the checker
pairs a start with its cut as with an end).
"""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

from tests.hosts.checker import check, read_bodies
from tests.hosts.hosts import Hosts
from tests.procs import Sluice, wait_until

HEARTBEAT_TIMEOUT = 5.0

SOURCE = """
import os, time
from datetime import datetime, timedelta, timezone
from sluice import DAG, task


def mark(kind, context):
    directory = os.environ.get("HOSTS_DIR", {elsewhere!r})
    os.makedirs(directory, exist_ok=True)
    fields = (
        kind, context["run_id"], context["task_id"], -1, context["try_number"],
        context.get("attempt_id"), os.environ.get("HOSTS_NAME", "?"), os.getpid(),
        time.time_ns(),
    )
    fd = os.open(os.path.join(directory, "tries.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, (" ".join(str(f) for f in fields) + "\\n").encode())
    finally:
        os.close(fd)


with DAG("fenced", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
         catchup=False) as dag:
    @task(task_id="long", retries=1, retry_delay=timedelta(milliseconds=200))
    def long(context):
        mark("start", context)
        try:
            for _ in range(60):
                time.sleep(0.1)
        except BaseException:
            mark("cut", context)
            raise
        mark("end", context)
"""


def lines(root: Path, kind: str) -> list[list[str]]:
    found = []
    for log in sorted(root.glob("*/tries.log")):
        found += [line.split() for line in log.read_text().splitlines() if line.startswith(kind)]
    return found


def test_a_worker_cut_off_from_postgres_fences_its_try(sluice: Sluice, hosts: Hosts) -> None:
    (sluice.dags_folder / "fenced.py").write_text(
        textwrap.dedent(SOURCE.format(elsewhere=str(hosts.root / "elsewhere")))
    )
    sluice.run("dags", "list")
    hosts.scheduler("s1")
    w1 = hosts.worker("w1", concurrency=1)
    run_id = sluice.trigger("fenced", "--run-id", "r1")
    wait_until(lambda: lines(hosts.root, "start"), timeout=30)
    w2 = hosts.worker("w2", concurrency=1)

    # When w1 loses PostgreSQL for 3x the heartbeat timeout while its body runs
    w1.pg.cut()
    cut_at = time.time_ns()
    wait_until(lambda: "has not reached the database" in w1.log(), timeout=HEARTBEAT_TIMEOUT)
    time.sleep(3 * HEARTBEAT_TIMEOUT - (time.time_ns() - cut_at) / 1e9)
    w1.pg.restore()

    # Then the run finishes: the try w1 stopped is retried once, and no two bodies overlap
    assert sluice.wait_run("fenced", run_id, timeout=60) == "success", hosts.logs()
    cut = lines(hosts.root, "cut")
    assert [(c[2], c[4], c[6]) for c in cut] == [("long", "1", "w1")], cut
    stopped_after = (int(cut[0][8]) - cut_at) / 1e9
    assert stopped_after < HEARTBEAT_TIMEOUT, f"stopped {stopped_after:.1f}s after the cut"
    ended = lines(hosts.root, "end")
    assert [(e[2], e[4]) for e in ended] == [("long", "2")], ended  # one body finished
    bodies = sorted(read_bodies(hosts.root), key=lambda b: b.start_ns)
    assert bodies[0].end_ns is not None and bodies[1].start_ns > bodies[0].end_ns
    # w1 recorded nothing for its try: the sweep did (a dead worker's error), once
    states = sluice.db_task_states("fenced", run_id)
    assert states["long"]["state"] == "success" and states["long"]["try_number"] == 2
    with sluice._connect() as conn:
        first = conn.exec_driver_sql(
            "SELECT y.state FROM task_try y JOIN task_instance t ON t.id = y.ti_id "
            "WHERE t.run_id = 'r1' AND y.try_number = 1"
        ).scalar()
    assert first == "up_for_retry", first
    assert "stopped heartbeating" in sluice.logs() or "stopped heartbeating" in hosts.logs()

    # And w1 serves on once its link is back
    w2.stop()
    again = sluice.trigger("fenced", "--run-id", "r2")
    assert sluice.wait_run("fenced", again, timeout=60) == "success", hosts.logs()
    assert any(e[1] == "r2" and e[6] == "w1" for e in lines(hosts.root, "end"))
    hosts.stop_all()
    check(sluice.database_url, hosts.root, "fenced", ["r1", "r2"], ["long"], bodies_once=False)
