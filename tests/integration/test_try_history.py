"""Each try of a task instance keeps its own outcome, host and times (`task_try`), so the
run's Gantt chart (`GET …/runs/{run_id}/tries`) draws every try from its queueing to its
end: a try that failed and was retried, and a try before a clear. Real scheduler and
worker on PostgreSQL; the same trigger on SQLite is checked on `sluice standalone`.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import uuid
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from sluice.scheduler.api import create_app
from sluice.scheduler.api.config import ApiConfig
from sluice.scheduler.core.settings import Settings
from tests.integration.test_cancel_run import rows
from tests.procs import Sluice, run_sluice

DAG = """
from datetime import timedelta
from pathlib import Path
from sluice import DAG, task

MARK = Path(__file__).with_suffix(".tried")

with DAG("tries", schedule=None) as dag:
    @task(retries=1, retry_delay=timedelta(milliseconds=100))
    def flaky():
        if not MARK.exists():
            MARK.write_text("once")
            raise RuntimeError("the first try fails")
        return 1
"""


def tries_of(database_url: str, run_id: str) -> list[dict[str, Any]]:
    settings = Settings(database_url=database_url, namespace=f"t{uuid.uuid4().hex[:8]}")
    with TestClient(create_app(settings, config=ApiConfig())) as client:
        response = client.get(f"/api/v1/dags/tries/runs/{run_id}/tries")
    assert response.status_code == 200, response.text
    [ti] = response.json()["task_instances"]
    tries: list[dict[str, Any]] = ti["tries"]
    return tries


def assert_whole(one: dict[str, Any], state: str) -> None:
    """A try with its outcome, host, and queued <= started <= finished."""
    assert one["state"] == state and one["hostname"], one
    times = [dt.datetime.fromisoformat(one[k]) for k in ("queued_at", "started_at", "finished_at")]
    assert times == sorted(times), one


def test_a_retried_and_a_cleared_try_keep_their_own_times(sluice: Sluice) -> None:
    (sluice.dags_folder / "tries_dag.py").write_text(DAG)
    sluice.scheduler()
    sluice.worker()
    run_id = sluice.trigger("tries")
    assert sluice.wait_run("tries", run_id) == "success"
    first, second = tries_of(sluice.database_url, run_id)
    assert_whole(first, "up_for_retry")  # it failed, and was retried
    assert_whole(second, "success")
    assert first["finished_at"] <= second["queued_at"]

    sluice.ok("tasks", "clear", "tries", run_id, "--task", "flaky")
    assert sluice.wait_run("tries", run_id) == "success"
    tries = tries_of(sluice.database_url, run_id)
    assert [t["try_number"] for t in tries] == [1, 2, 3]
    assert tries[:2] == [first, second]  # the clear kept try 2 as it ended
    assert_whole(tries[2], "success")
    kept = rows(sluice.database_url, "SELECT try_number, state FROM task_try ORDER BY 1")
    assert [tuple(r) for r in kept] == [(1, "up_for_retry"), (2, "success")]


def test_standalone_on_sqlite_keeps_each_try(tmp_path: Path) -> None:
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "tries_dag.py").write_text(DAG)
    url = f"sqlite:///{tmp_path / 'sluice.db'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLUICE_", "OTEL_"))}
    env |= {"SLUICE_DATABASE_URL": url, "SLUICE_DAGS_FOLDER": str(dags)}
    done = run_sluice(
        "standalone", "--trigger", "tries", "--json", env=env, timeout=120, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    run_id = json.loads(done.stdout)["run_id"]
    first, second = tries_of(url, run_id)
    assert_whole(first, "up_for_retry")
    assert_whole(second, "success")
