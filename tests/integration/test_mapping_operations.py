"""Where a user looks at and acts on a mapped task, on a real scheduler and worker: `tasks
states` (a map index column, a summary row), `tasks logs/explain --map-index`, clearing one
index with its downstream (its one-to-one index and the reduce, not every index), and the
REST API's map_index on TIs, filters and lookups."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from sluice.scheduler.api import create_app
from sluice.scheduler.api.config import ApiConfig
from sluice.scheduler.core.settings import Settings
from tests.integration.test_cancel_run import rows
from tests.procs import Sluice

TOKEN = "map-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}

DAG = """
from sluice import DAG, task

with DAG("files", schedule=None) as dag:
    @task
    def list_files():
        return ["a.csv", "bb.csv", "ccc.csv", "dddd.csv", "eeeee.csv"]

    @task
    def load(path, table):
        print("loading", path, "into", table)
        return len(path)

    @task
    def double(n):
        return 2 * n

    @task
    def total(values):
        return sum(values)

    @task
    def audit(counts):
        return len(counts)

    counts = load.partial(table="raw").expand(path=list_files())
    total(double.expand(n=counts))
    audit(counts)
"""


def tries(sluice: Sluice, run_id: str) -> dict[tuple[str, int], int]:
    found = rows(
        sluice.database_url,
        f"SELECT task_id, map_index, try_number FROM task_instance WHERE run_id = '{run_id}'",
    )
    return {(str(t), int(str(i))): int(str(n)) for t, i, n in found}


@pytest.fixture
def api(sluice: Sluice) -> Iterator[TestClient]:
    settings = Settings(
        database_url=sluice.database_url,
        broker_url=sluice.broker_url,
        namespace=sluice.namespace,
    )
    app = create_app(settings, config=ApiConfig(token=TOKEN))
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client


def test_states_logs_explain_and_clearing_one_index(sluice: Sluice, api: TestClient) -> None:
    (sluice.dags_folder / "files.py").write_text(textwrap.dedent(DAG))
    sluice.run("dags", "list")
    sluice.scheduler()
    sluice.worker(concurrency=4)
    run_id = sluice.trigger("files")
    assert sluice.wait_run("files", run_id) == "success"

    table = sluice.ok("tasks", "states", "files", run_id)
    assert "index" in table
    assert "0-4" in table and "5 success" in table  # the summary row of `load`, of `double`
    listed = json.loads(sluice.ok("tasks", "states", "files", run_id, "--json"))
    assert [r["map_index"] for r in listed if r["task_id"] == "double"] == [0, 1, 2, 3, 4]
    assert {r["map_index"] for r in listed if r["task_id"] in ("total", "audit")} == {None}

    logs = sluice.ok("tasks", "logs", "files", run_id, "load", "--map-index", "3")
    assert "loading dddd.csv into raw" in logs
    refused = sluice.cli("tasks", "logs", "files", run_id, "load")
    assert refused.returncode != 0
    assert "mapped: name one of its indexes 0..4 with --map-index" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    bad = sluice.cli("tasks", "logs", "files", run_id, "load", "--map-index", "x")
    assert bad.returncode != 0 and "--map-index must be a whole number" in bad.stderr
    missing = sluice.cli("tasks", "logs", "files", run_id, "load", "--map-index", "9")
    assert missing.returncode != 0 and "no index 9 of task 'load'" in missing.stderr

    explained = json.loads(
        sluice.ok("tasks", "explain", "files", run_id, "double", "--map-index", "2", "--json")
    )
    assert (explained["map_index"], explained["state"]) == (2, "success")

    two = sluice.cli(
        "tasks", "clear", "files", run_id, "--task", "load", "--task", "double", "--map-index", "1"
    )
    assert two.returncode != 0 and "exactly one --task" in two.stderr
    out = sluice.ok(
        "tasks", "clear", "files", run_id, "--task", "load", "--map-index", "3", "--downstream"
    )
    assert "cleared 4 task instance(s)" in out  # load[3], double[3], total, audit
    assert sluice.wait_run("files", run_id) == "success"
    again = {("load", 3): 2, ("double", 3): 2, ("total", -1): 2, ("audit", -1): 2}
    assert tries(sluice, run_id) == {
        **{("load", i): 1 for i in range(5)},
        **{("double", i): 1 for i in range(5)},
        ("list_files", -1): 1,
        **again,
    }
    (total,) = rows(
        sluice.database_url,
        f"SELECT result FROM task_instance WHERE run_id = '{run_id}' AND task_id = 'total'",
    )
    assert json.loads(str(total[0])) == 2 * (5 + 6 + 7 + 8 + 9)  # twice the names' lengths

    # the REST API: map_index on TIs, filters, lookups, clearing one index
    base = f"/api/v1/dags/files/runs/{run_id}/tasks"
    loads = api.get(base, params={"task_id": "load"}).json()["task_instances"]
    assert [t["map_index"] for t in loads] == [0, 1, 2, 3, 4]
    assert api.get(base, params={"map_index": 3}).json()["total"] == 2  # load[3], double[3]
    assert api.get(base, params={"state": "failed"}).json()["task_instances"] == []
    detail = api.get(f"{base}/load", params={"map_index": 3})
    assert detail.status_code == 200 and detail.json()["map_index"] == 3
    unnamed = api.get(f"{base}/load")
    assert unnamed.status_code == 404 and "map_index" in unnamed.json()["detail"]
    log = api.get(f"{base}/load/logs", params={"map_index": 4}).json()
    assert "loading eeeee.csv into raw" in log["content"]
    assert api.get(f"{base}/load", params={"map_index": -1}).status_code == 422
    cleared = api.post(
        f"{base}/load/clear", json={"map_index": 1, "downstream": True}, headers=AUTH
    )
    assert cleared.status_code == 200 and cleared.json()["cleared"] == 4
    assert sluice.wait_run("files", run_id) == "success"
    assert tries(sluice, run_id)[("load", 1)] == 2
    assert tries(sluice, run_id)[("double", 1)] == 2
    assert tries(sluice, run_id)[("load", 0)] == 1
