"""`POST …/runs/{run_id}/tasks/{task_id}/mark` and `POST …/runs/{run_id}/mark`: what they
mark, who is recorded; the token is required; unknown DAG, run or task is 404, a mark
of what is in that state already 409, a bad body 422, and none of them changes anything."""

from __future__ import annotations

from fastapi.testclient import TestClient

from sluice.scheduler.core.settings import Settings
from sluice.scheduler.core.states import TI, DagRunState
from tests.api.conftest import AUTH
from tests.api.test_api import V1, finish, trigger
from tests.api.test_cancel import audit_rows


def states_of(client: TestClient, run_id: str) -> dict[str, str]:
    tis = client.get(f"{V1}/dags/demo/runs/{run_id}/tasks").json()["task_instances"]
    return {t["task_id"]: t["state"] for t in tis}


def test_mark_tasks_and_runs(client: TestClient, settings: Settings) -> None:
    trigger(client, run_id="m1")
    url = f"{V1}/dags/demo/runs/m1"
    body = {"state": "success", "downstream": True}
    response = client.post(f"{url}/tasks/transform/mark", json=body, headers=AUTH)
    assert response.status_code == 200, response.text
    assert response.json() == {"marked": ["transform", "load"], "stopped": 0, "run_state": "queued"}
    failed = {"state": "failed", "upstream": True}
    response = client.post(f"{url}/tasks/audit/mark", json=failed, headers=AUTH)
    assert response.json()["marked"] == ["extract", "audit"]
    assert states_of(client, "m1") == {
        "extract": "failed",
        "transform": "success",
        "load": "success",
        "audit": "failed",
    }
    reasons = client.get(f"{url}/tasks/load").json()["reasons"]
    said = "mark success of task 'load' by api (bearer token) at "
    assert any(r.startswith(said) for r in reasons)
    # a run marked failed, then success: every TI not success or skipped becomes success
    response = client.post(f"{url}/mark", json={"state": "failed"}, headers=AUTH)
    assert response.json()["run_state"] == "failed"
    response = client.post(f"{url}/mark", json={"state": "success"}, headers=AUTH)
    assert response.json() == {"marked": ["extract", "audit"], "stopped": 0, "run_state": "success"}
    assert set(states_of(client, "m1").values()) == {"success"}
    assert [row[1] for row in audit_rows(settings)] == [
        "mark success",
        "mark success",
        "mark failed",
        "mark failed",
        "mark failed",
        "mark success",
    ]


def test_marks_refuse_and_change_nothing(client: TestClient, settings: Settings) -> None:
    trigger(client, run_id="open")
    trigger(client, run_id="done")
    finish(settings, "done", {"extract": TI.SUCCESS}, DagRunState.SUCCESS)
    ok_task: dict[str, object] = {"state": "skipped"}
    cases: list[tuple[str, dict[str, object], dict[str, str], int]] = [
        ("demo/runs/open/tasks/extract/mark", ok_task, {}, 401),
        ("nope/runs/open/tasks/extract/mark", ok_task, AUTH, 404),
        ("demo/runs/nope/tasks/extract/mark", ok_task, AUTH, 404),
        ("demo/runs/open/tasks/nope/mark", ok_task, AUTH, 404),
        ("demo/runs/done/tasks/extract/mark", {"state": "success"}, AUTH, 409),
        ("demo/runs/open/tasks/extract/mark", {"state": "running"}, AUTH, 422),
        ("demo/runs/open/tasks/extract/mark", {"state": "success", "x": 1}, AUTH, 422),
        ("demo/runs/open/tasks/extract/mark", {"state": "success", "upstream": "yes"}, AUTH, 422),
        ("demo/runs/open/tasks/extract/mark", {}, AUTH, 422),
        ("demo/runs/open/mark", {"state": "failed"}, {}, 401),
        ("nope/runs/open/mark", {"state": "failed"}, AUTH, 404),
        ("demo/runs/nope/mark", {"state": "failed"}, AUTH, 404),
        ("demo/runs/done/mark", {"state": "success"}, AUTH, 409),
        ("demo/runs/open/mark", {"state": "skipped"}, AUTH, 422),
    ]
    for path, body, headers, status in cases:
        response = client.post(f"{V1}/dags/{path}", json=body, headers=headers)
        assert response.status_code == status, (path, body, response.text)
        detail = response.json()["detail"]
        assert isinstance(detail, list) or "\n" not in detail
    assert set(states_of(client, "open").values()) == {"none"}
    assert client.get(f"{V1}/dags/demo/runs/done").json()["state"] == "success"
    assert audit_rows(settings) == []
