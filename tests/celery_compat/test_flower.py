"""Flower, a Celery client Sluice did not write, watching Sluice's workers.

Flower (from PyPI, the `test` extra) runs as `celery --broker=URL flower`, as a user
would start it, in its own process group on a free port, beside a real `sluice
scheduler` and `sluice worker -E`. The test reads Flower's own HTTP API: its worker
list (Celery's remote control, `inspect active_queues`) and its task list (the workers'
task events).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

import httpx

from tests.procs import Sluice, wait_until
from tests.redis_server import free_port

DAG = """
from sluice import DAG, task

with DAG("watched", schedule=None) as dag:
    @task
    def extract():
        return 1

    @task
    def load():
        raise RuntimeError("load refuses")

    extract >> load
"""


def start_flower(sluice: Sluice, port: int) -> subprocess.Popen[bytes]:
    """`celery --broker=<Sluice's broker> flower` on 127.0.0.1:`port`, its own process
    group; the API open without auth (FLOWER_UNAUTHENTICATED_API), and Flower's own
    periodic `enable_events` broadcast off, so only the worker's `-E` sends events."""
    log = open(sluice.log_dir / f"flower-{len(sluice.procs)}.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", f"--broker={sluice.broker_url}", "flower"]
        + [f"--port={port}", "--address=127.0.0.1", "--enable_events=False"],
        env={**sluice.env, "FLOWER_UNAUTHENTICATED_API": "true"},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    sluice.procs.append(proc)  # stopped by its pid after the test, group killed if stuck
    return proc


def flower_get(port: int, path: str) -> Any:
    """Flower's JSON at `path`, or None while Flower does not answer yet."""
    try:
        response = httpx.get(f"http://127.0.0.1:{port}{path}", timeout=5)
    except httpx.TransportError:
        return None
    return response.json() if response.status_code == 200 else None


def test_flower_lists_sluice_worker_and_tasks_by_dag_and_task_id(sluice: Sluice) -> None:
    # Given a DAG (extract succeeds, load fails), a scheduler, a worker sending task
    # events, and Flower on the same broker
    (sluice.dags_folder / "watched.py").write_text(textwrap.dedent(DAG))
    sluice.scheduler()
    worker = sluice.start("worker", "worker", "-Q", "default", "-c", "2", "-E")
    port = free_port()
    flower = start_flower(sluice, port)

    # When Flower has seen the worker (an event of its: Flower listens) and the run ends
    def seen() -> dict[str, bool] | None:
        assert flower.poll() is None, sluice.logs()
        assert worker.poll() is None, sluice.logs()
        status = flower_get(port, "/api/workers?status=1")
        return status if status and any(status.values()) else None

    wait_until(seen, timeout=30)
    run_id = sluice.trigger("watched")
    assert sluice.wait_run("watched", run_id) == "failed"

    # Then Flower's worker list has the Sluice worker with its Sluice queues
    workers = wait_until(lambda: flower_get(port, "/api/workers?refresh=1"), timeout=20)
    [(name, info)] = workers.items()
    assert name.startswith("sluice@")
    queues = {queue["name"] for queue in info["active_queues"]}
    assert queues == {f"{sluice.namespace}.default", f"{sluice.namespace}.callbacks"}

    # and its task list shows each task as dag_id.task_id with its state: a try that
    # failed is a failed Celery task (its failure one line), a success a success
    def tasks_done() -> dict[str, tuple[str, str | None]] | None:
        tasks = flower_get(port, "/api/tasks") or {}
        seen = {t["name"]: (t["state"], t["result"] or t.get("exception")) for t in tasks.values()}
        ended = {"SUCCESS", "FAILURE"}
        return seen if len(seen) == 2 and all(s in ended for s, _ in seen.values()) else None

    assert wait_until(tasks_done, timeout=20) == {
        "watched.extract": ("SUCCESS", "'success'"),
        "watched.load": ("FAILURE", "TryFailed('watched.load try 1: failed')"),
    }
    # Celery logged the failed try as an expected failure: one line, no traceback of its
    # own (the user's exception is logged once, by Sluice, with the try)
    log = sluice.logs()
    assert "raised expected: TryFailed('watched.load try 1: failed')" in log, log
    assert "raised unexpected" not in log, log
    sluice.stop(flower)
