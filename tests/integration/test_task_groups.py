"""Task groups on real schedulers and a worker: a mapped group runs index by index
(depth-first), a failing index leaves the others alone, and `sluice tasks clear DAG RUN
GROUP` clears the group's tasks."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from tests.integration.test_mapping import of, tis
from tests.integration.test_mapping_operations import AUTH, api  # noqa: F401 - a fixture
from tests.procs import Sluice, wait_until

GROUP_DAG = """
import time
from pathlib import Path
from sluice import DAG, TaskGroup, task, task_group

GATE = Path({gate!r})  # index 2's first task waits for it
BROKEN = Path({broken!r})  # while it exists, index 1's first task fails

with DAG("groups", schedule=None, max_active_tasks=8) as dag:
    @task
    def items():
        return [0, 1, 2]

    @task_group
    def per_item(x):
        @task
        def first(x):
            if x == 1 and BROKEN.exists():
                raise ValueError("index 1 is broken")
            deadline = time.time() + 60
            while x == 2 and not GATE.exists() and time.time() < deadline:
                time.sleep(0.05)
            return x * 10

        @task
        def second(y):
            return y + 1

        @task
        def third():
            return "done"

        out = second(first(x))
        out >> third
        return out

    @task
    def gather(values):
        return values

    with TaskGroup("setup") as setup:
        @task
        def prepare():
            return "ready"

    setup >> items
    gather(per_item.expand(x=items()))
"""


def _start(sluice: Sluice, tmp_path: Path, broken: bool) -> tuple[Path, Path]:
    gate, flag = tmp_path / "gate", tmp_path / "broken"
    if broken:
        flag.write_text("")
    (sluice.dags_folder / "groups.py").write_text(
        textwrap.dedent(GROUP_DAG.format(gate=str(gate), broken=str(flag)))
    )
    sluice.run("dags", "list")
    sluice.scheduler()
    sluice.scheduler()
    sluice.worker(concurrency=4)
    return gate, flag


def _ti(found: list[dict[str, Any]], task_id: str, index: int) -> dict[str, Any]:
    (ti,) = [t for t in of(found, task_id) if t["map_index"] == index]
    return ti


def test_a_mapped_group_runs_depth_first(
    sluice: Sluice,
    tmp_path: Path,
    api: TestClient,  # noqa: F811 - the fixture imported above
) -> None:
    gate, _ = _start(sluice, tmp_path, broken=False)
    run_id = sluice.trigger("groups")

    def index_0_done() -> list[dict[str, Any]] | None:
        found = tis(sluice, run_id)
        done = [t for t in of(found, "per_item.third") if t["map_index"] == 0]
        return found if done and done[0]["state"] == "success" else None

    found = wait_until(index_0_done, timeout=60)
    # index 0 ran its whole group while index 2's first task is held at the gate
    assert _ti(found, "per_item.second", 0)["state"] == "success"
    assert _ti(found, "per_item.first", 2)["state"] == "running"
    assert _ti(found, "per_item.second", 2)["state"] == "none"
    gate.write_text("")
    assert sluice.wait_run("groups", run_id) == "success"
    found = tis(sluice, run_id)
    for task_id in ("per_item.first", "per_item.second", "per_item.third"):
        assert [t["map_index"] for t in of(found, task_id)] == [0, 1, 2]
        assert {t["state"] for t in of(found, task_id)} == {"success"}
    assert json.loads(_ti(found, "gather", -1)["result"]) == [1, 11, 21]
    assert _ti(found, "setup.prepare", -1)["state"] == "success"

    # the API clears a group's tasks by the group's id; an unknown id is a 404
    base = f"/api/v1/dags/groups/runs/{run_id}/tasks"
    cleared = api.post(f"{base}/setup/clear", headers=AUTH)
    assert cleared.status_code == 200 and cleared.json()["cleared"] == 1
    assert api.post(f"{base}/nothing/clear", headers=AUTH).status_code == 404
    assert sluice.wait_run("groups", run_id) == "success"
    assert _ti(tis(sluice, run_id), "setup.prepare", -1)["try_number"] == 2


def test_a_failing_index_leaves_the_others_and_a_group_clears(
    sluice: Sluice, tmp_path: Path
) -> None:
    gate, flag = _start(sluice, tmp_path, broken=True)
    gate.write_text("")
    run_id = sluice.trigger("groups")
    assert sluice.wait_run("groups", run_id) == "failed"
    found = tis(sluice, run_id)
    states = {
        task_id: [t["state"] for t in of(found, task_id)]
        for task_id in ("per_item.first", "per_item.second", "per_item.third")
    }
    assert states == {
        "per_item.first": ["success", "failed", "success"],
        "per_item.second": ["success", "upstream_failed", "success"],
        "per_item.third": ["success", "upstream_failed", "success"],
    }
    assert _ti(found, "gather", -1)["state"] == "upstream_failed"

    unknown = sluice.cli("tasks", "clear", "groups", run_id, "nothing")
    assert unknown.returncode == 2 and len(unknown.stderr.strip().splitlines()) == 1
    assert "has no task 'nothing'" in unknown.stderr

    flag.unlink()
    out = sluice.ok(
        "tasks", "clear", "groups", run_id, "per_item", "--map-index", "1", "--downstream"
    )
    assert out.startswith("cleared 4 task instance(s)")  # index 1 of each, and gather
    assert sluice.wait_run("groups", run_id) == "success"
    found = tis(sluice, run_id)
    assert json.loads(_ti(found, "gather", -1)["result"]) == [1, 11, 21]
    assert _ti(found, "per_item.first", 1)["try_number"] == 2
    assert _ti(found, "per_item.first", 0)["try_number"] == 1
