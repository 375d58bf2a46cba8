"""The fault tests' DAG: a first task and its downstream tasks, each writing its try's start
and end to a file on the host that runs it.

Each line of `<host dir>/tries.log` (O_APPEND, one write a line) is
`start|end RUN_ID TASK_ID MAP_INDEX TRY_NUMBER ATTEMPT_ID HOST PID TIME_NS`; the host's
directory and name come from its environment (`HOSTS_DIR`, `HOSTS_NAME`, set by
`tests.hosts.hosts.Hosts`); a try run by anything else writes under `<root>/elsewhere/`, so
no try goes unseen.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from tests.procs import Sluice

SOURCE = """
import os, time
from datetime import datetime, timedelta, timezone
from sluice import DAG, task

ELSEWHERE = {elsewhere!r}

def mark(kind, context):
    directory = os.environ.get("HOSTS_DIR", ELSEWHERE)
    os.makedirs(directory, exist_ok=True)
    index = context.get("map_index")
    fields = (
        kind, context["run_id"], context["task_id"], -1 if index is None else index,
        context["try_number"], context.get("attempt_id"), os.environ.get("HOSTS_NAME", "?"),
        os.getpid(), time.time_ns(),
    )
    fd = os.open(os.path.join(directory, "tries.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, (" ".join(str(f) for f in fields) + "\\n").encode())
    finally:
        os.close(fd)

with DAG({dag_id!r}, schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
         catchup=False, max_active_runs={max_active_runs}, max_active_tasks=64) as dag:
    @task(task_id="a", retries={retries}, retry_delay=timedelta(milliseconds=200))
    def first(context):
        mark("start", context)
        time.sleep({sleep})
        mark("end", context)

    for i in range({width} - 1):
        @task(task_id=f"b{{i}}", retries={retries}, retry_delay=timedelta(milliseconds=200))
        def then(context):
            mark("start", context)
            time.sleep({sleep})
            mark("end", context)
        first >> then
"""


def task_ids(width: int) -> list[str]:
    return ["a", *[f"b{i}" for i in range(width - 1)]]


def write_dag(
    sluice: Sluice,
    root: Path,
    *,
    dag_id: str = "tries",
    width: int = 3,
    sleep: float = 0.3,
    retries: int = 2,
    max_active_runs: int = 20,
) -> list[str]:
    """Write the DAG `dag_id` (`width` tasks: `a`, then `b0`… side by side); its task ids."""
    assert width >= 1
    (sluice.dags_folder / f"{dag_id}.py").write_text(
        textwrap.dedent(
            SOURCE.format(
                elsewhere=str(root / "elsewhere"),
                dag_id=dag_id,
                width=width,
                sleep=sleep,
                retries=retries,
                max_active_runs=max_active_runs,
            )
        )
    )
    return task_ids(width)
