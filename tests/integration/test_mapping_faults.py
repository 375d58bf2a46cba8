"""A 5,000-item map under faults: two schedulers, one SIGKILLed right after the expansion
began, and a worker SIGKILLed while indexes run. The task is expanded once (5,000 TIs,
each index once), every index succeeds once (checked from real executions, appended to a
file), and the reduce sees all 5,000 results."""

from __future__ import annotations

import collections
import os
import signal
import textwrap
from pathlib import Path

import pytest

from tests.integration.test_cancel_run import rows
from tests.procs import Sluice, wait_until

ITEMS = 5000

DAG = """
import os
from datetime import timedelta
from sluice import DAG, task

LOG = {log!r}

with DAG("wide_map", schedule=None, max_active_tasks=64) as dag:
    @task
    def items():
        return list(range({items}))

    @task(retries=2, retry_delay=timedelta(milliseconds=100))
    def work(x, context):
        line = f"{{x}} {{context['map_index']}} {{context['try_number']}}\\n"
        fd = os.open(LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        os.write(fd, line.encode())
        os.close(fd)
        return x

    @task
    def count(values):
        return [len(values), sum(values)]

    count(work.expand(x=items()))
"""


def executions(log: Path) -> collections.Counter[int]:
    if not log.exists():
        return collections.Counter()
    lines = [line.split() for line in log.read_text().splitlines()]
    assert all(x == index for x, index, _ in lines), "an index ran with another's item"
    return collections.Counter(int(x) for x, _, _ in lines)


@pytest.mark.long
@pytest.mark.timeout(400)  # its own waits: 60 + 60 + 240 s
def test_a_wide_map_expands_once_and_runs_each_index_once(sluice: Sluice, tmp_path: Path) -> None:
    log = tmp_path / "exec.log"
    (sluice.dags_folder / "wide_map.py").write_text(
        textwrap.dedent(DAG.format(log=str(log), items=ITEMS))
    )
    sluice.run("dags", "list")
    first = sluice.scheduler()
    sluice.scheduler()
    doomed = sluice.worker(concurrency=4)
    run_id = sluice.trigger("wide_map")

    def indexes() -> int:
        found = rows(
            sluice.database_url,
            f"SELECT count(*) FROM task_instance WHERE run_id = '{run_id}' AND map_index >= 0",
        )
        return int(str(found[0][0]))

    # one scheduler dies as soon as the expansion is visible; the worker mid-run
    wait_until(indexes, timeout=60, every=0.02)
    first.send_signal(signal.SIGKILL)
    first.wait()
    wait_until(lambda: sum(executions(log).values()) >= 200, timeout=60)
    sluice.worker(concurrency=4)
    os.killpg(doomed.pid, signal.SIGKILL)  # the worker and its pool children
    doomed.wait()

    assert sluice.wait_run("wide_map", run_id, timeout=240) == "success"
    found = rows(
        sluice.database_url,
        f"SELECT map_index, state, try_number FROM task_instance "
        f"WHERE run_id = '{run_id}' AND task_id = 'work' ORDER BY map_index",
    )
    assert [int(str(i)) for i, _, _ in found] == list(range(ITEMS))  # expanded once
    assert {str(s) for _, s, _ in found} == {"success"}
    ran = executions(log)
    assert set(ran) == set(range(ITEMS))
    tries = {int(str(i)): int(str(n)) for i, _, n in found}
    twice = {x: n for x, n in ran.items() if n > 1}
    # an index ran again only as a new try of one the killed worker held
    assert all(n <= tries[x] for x, n in twice.items()), twice
    assert len(twice) <= 8, twice
    (result,) = rows(
        sluice.database_url,
        f"SELECT result FROM task_instance WHERE run_id = '{run_id}' AND task_id = 'count'",
    )
    assert str(result[0]).replace(" ", "") == f"[{ITEMS},{sum(range(ITEMS))}]"
