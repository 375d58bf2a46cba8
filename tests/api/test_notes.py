"""`PUT …/runs/{run_id}/note` and `PUT …/runs/{run_id}/tasks/{task_id}/note`: the note, its
author and time come back, and in the run's and the task instance's own pages; bad notes
are 422, unknown ids 404, no token 401, and none of them writes anything."""

from __future__ import annotations

from fastapi.testclient import TestClient

from sluice.scheduler.core.settings import Settings
from tests.api.conftest import AUTH
from tests.api.test_api import V1, trigger
from tests.api.test_cancel import audit_rows


def test_notes_on_a_run_and_a_task_instance(client: TestClient, settings: Settings) -> None:
    trigger(client, run_id="n1")
    assert client.get(f"{V1}/dags/demo/runs/n1").json()["note"] is None
    put = client.put(f"{V1}/dags/demo/runs/n1/note", json={"note": " checked "}, headers=AUTH)
    assert put.status_code == 200, put.text
    assert put.json()["note"] == "checked" and put.json()["who"] == "api (bearer token)"
    assert client.get(f"{V1}/dags/demo/runs/n1").json()["note"]["note"] == "checked"
    path = f"{V1}/dags/demo/runs/n1/tasks/load"
    assert client.put(f"{path}/note", json={"note": "slow disk"}, headers=AUTH).status_code == 200
    assert client.get(path).json()["note"]["note"] == "slow disk"
    assert client.get(f"{V1}/dags/demo/runs/n1/tasks/audit").json()["note"] is None
    assert [r[1:] for r in audit_rows(settings)] == [
        ("note", "demo", "n1", None),
        ("note", "demo", "n1", "load"),
    ]


def test_bad_notes_change_nothing(client: TestClient, settings: Settings) -> None:
    trigger(client, run_id="n1")
    run_note = f"{V1}/dags/demo/runs/n1/note"
    cases = [
        (run_note, {"note": "hi"}, {}, 401),
        (f"{V1}/dags/nope/runs/n1/note", {"note": "hi"}, AUTH, 404),
        (f"{V1}/dags/demo/runs/nope/note", {"note": "hi"}, AUTH, 404),
        (f"{V1}/dags/demo/runs/n1/tasks/nope/note", {"note": "hi"}, AUTH, 404),
        (run_note, {"note": ""}, AUTH, 422),
        (run_note, {"note": "x" * 501}, AUTH, 422),
        (run_note, {"note": "a\u001b[31mred"}, AUTH, 422),
        (run_note, b'{"note": "x\\ud800"}', AUTH, 422),  # a lone surrogate, escaped
        (run_note, {"note": 3}, AUTH, 422),
        (run_note, {}, AUTH, 422),
    ]
    for path, body, headers, status in cases:
        if isinstance(body, bytes):
            raw = {**headers, "Content-Type": "application/json"}
            response = client.put(path, content=body, headers=raw)
        else:
            response = client.put(path, json=body, headers=headers)
        assert response.status_code == status, (path, body, response.text)
        assert "\n" not in response.json()["detail"]
    assert audit_rows(settings) == []
