"""DAG files that hang, flood or multiply: nothing wedges (real processes, PostgreSQL)."""

from __future__ import annotations

import signal
import textwrap
import time

from tests.procs import Sluice, wait_until

HANGS_IN_WORKERS = """
import sys
import time
from sluice import DAG, task

if "worker" in sys.argv:  # the scheduler's parser imports it fine; a worker hangs in it
    time.sleep(3600)

with DAG("hangs", schedule=None) as dag:
    task(task_id="h")(lambda: 1)
"""

FINE = """
from sluice import DAG, task

with DAG("fine", schedule=None) as dag:
    task(task_id="f")(lambda: 1)
"""


def test_a_dag_file_that_hangs_in_a_worker_fails_its_tries_not_the_worker(
    sluice: Sluice,
) -> None:
    """Both slots of `sluice worker -c 2` take a try of a DAG whose import hangs: each try
    fails after SLUICE_PARSE_TIMEOUT with what happened, the other DAG's task then runs,
    and the worker stops on SIGTERM."""
    sluice.extra_env["SLUICE_PARSE_TIMEOUT"] = "2"
    (sluice.dags_folder / "hangs.py").write_text(textwrap.dedent(HANGS_IN_WORKERS))
    (sluice.dags_folder / "fine.py").write_text(textwrap.dedent(FINE))
    sluice.scheduler()
    worker = sluice.worker(concurrency=2)
    hung = [sluice.trigger("hangs") for _ in range(2)]
    wait_until(
        lambda: all(sluice.db_task_states("hangs", r)["h"]["state"] == "running" for r in hung)
    )
    fine = sluice.trigger("fine")
    assert sluice.wait_run("fine", fine, timeout=60) == "success"
    for run_id in hung:
        assert sluice.wait_run("hangs", run_id, timeout=30) == "failed"
        ti = sluice.db_task_states("hangs", run_id)["h"]
        assert ti["state"] == "failed"
        assert "importing the DAG file" in ti["error"] and "longer than 2s" in ti["error"]
    started = time.monotonic()
    worker.send_signal(signal.SIGTERM)
    worker.wait(timeout=20)
    assert time.monotonic() - started < 20
