"""Faults on hosts' links (issue 46): each a test, each held to the checker
(`tests.hosts.checker`): every run finishes, each TI has exactly one recorded result, no
two tries of a TI overlap, nothing is left queued or running.

The DAG (`tests.hosts.dag`): `a`, then `b0` and `b1` side by side; each body writes its
start and end on its host. Settings: `tests.procs.Sluice` (heartbeat timeout 5 s).
"""

from __future__ import annotations

from pathlib import Path

from tests.hosts.checker import check
from tests.hosts.dag import write_dag
from tests.hosts.hosts import Hosts
from tests.procs import Sluice

DAG = "tries"


def trigger(sluice: Sluice, n: int) -> list[str]:
    """`n` runs, made at once (in this process)."""
    return [sluice.trigger(DAG, "--run-id", f"r{i:02d}") for i in range(n)]


def finish(sluice: Sluice, hosts: Hosts, runs: list[str], timeout: float = 60) -> None:
    for run_id in runs:
        try:
            sluice.wait_run(DAG, run_id, timeout=timeout)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{hosts.logs()}") from None
    hosts.stop_all()  # a worker's warm shutdown: every body running has written its end


def test_no_fault_each_body_once(sluice: Sluice, hosts: Hosts, tmp_path: Path) -> None:
    """The baseline: hosts through open links, every body once."""
    tasks = write_dag(sluice, hosts.root)
    sluice.ok("dags", "list")
    hosts.scheduler("s1")
    hosts.worker("w1")
    hosts.worker("w2")
    runs = trigger(sluice, 5)
    finish(sluice, hosts, runs)
    report = check(sluice.database_url, hosts.root, DAG, runs, tasks, bodies_once=True)
    assert report.executions == 15
    assert {b.host for b in report.bodies} == {"w1", "w2"}
