"""`POST /api/v1/dags/{dag_id}/runs/{run_id}/cancel`: the token is required; an unknown
DAG or run is 404, a run that has ended 409, and neither changes anything."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from sluice.scheduler.core.settings import Settings
from sluice.scheduler.core.states import TI, DagRunState
from tests.api.conftest import AUTH
from tests.api.test_api import V1, finish, trigger


def audit_rows(settings: Settings) -> list[tuple[object, ...]]:
    engine = create_engine(settings.database_url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            sql = "SELECT who, action, dag_id, run_id, task_id FROM audit_log ORDER BY id"
            return [tuple(r) for r in conn.execute(text(sql))]
    finally:
        engine.dispose()


def test_cancel_a_running_run(client: TestClient, settings: Settings) -> None:
    trigger(client, run_id="c1")
    finish(settings, "c1", {"extract": TI.SUCCESS}, DagRunState.RUNNING)
    # transform and audit are not started: they are skipped; the run fails
    response = client.post(f"{V1}/dags/demo/runs/c1/cancel", headers=AUTH)
    assert response.status_code == 200, response.text
    assert response.json()["state"] == "failed"
    states = {
        t["task_id"]: t["state"]
        for t in client.get(f"{V1}/dags/demo/runs/c1/tasks").json()["task_instances"]
    }
    assert states == {
        "extract": "success",
        "transform": "skipped",
        "audit": "skipped",
        "load": "skipped",
    }
    assert audit_rows(settings) == [("api (bearer token)", "cancel", "demo", "c1", None)]
    reasons = client.get(f"{V1}/dags/demo/runs/c1/tasks/load").json()["reasons"]
    assert any(r.startswith("cancel of the run by api (bearer token) at ") for r in reasons)


def test_cancel_refuses_and_changes_nothing(client: TestClient, settings: Settings) -> None:
    trigger(client, run_id="done")
    finish(settings, "done", {"extract": TI.SUCCESS}, DagRunState.SUCCESS)
    trigger(client, run_id="open")
    cases = [
        ("demo/runs/open/cancel", {}, 401),
        ("nope/runs/open/cancel", AUTH, 404),
        ("demo/runs/nope/cancel", AUTH, 404),
        ("demo/runs/done/cancel", AUTH, 409),
    ]
    for path, headers, status in cases:
        response = client.post(f"{V1}/dags/{path}", headers=headers)
        assert response.status_code == status, (path, response.text)
        assert "\n" not in response.json()["detail"]
    assert (
        "already ended (success)"
        in client.post(f"{V1}/dags/demo/runs/done/cancel", headers=AUTH).json()["detail"]
    )
    assert client.get(f"{V1}/dags/demo/runs/open").json()["state"] == "queued"
    assert client.get(f"{V1}/dags/demo/runs/done").json()["state"] == "success"
    assert audit_rows(settings) == []
