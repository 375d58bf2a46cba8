"""What a trigger may write: a conf both databases store and give back (no lone
surrogate, no NUL, no NaN or Infinity, at most SLUICE_MAX_CONF_BYTES) and a run id the
UI can name (not only dots, no control character); and lists that never read a conf.
"""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, event, text

from sluice.scheduler.api.config import ApiConfig
from sluice.scheduler.core.settings import Settings
from tests.api.conftest import AUTH, TOKEN, client_for

V1 = "/api/v1"
JSON = {**AUTH, "Content-Type": "application/json"}

POISON = [
    (rb'{"conf": {"k": "\ud800"}}', "lone surrogate"),
    (rb'{"conf": {"deep": [1, {"k": "\udfff"}]}}', '["deep"][1]["k"]'),
    (rb'{"conf": {"k\u0000": 1}}', "NUL"),
    (rb'{"conf": {"k": "a\u0000b"}}', "NUL"),
    (rb'{"conf": {"x": NaN}}', "NaN or Infinity"),
    (rb'{"conf": {"x": Infinity}}', "NaN or Infinity"),
    (rb'{"conf": {"x": [1, {"y": -Infinity}]}}', '["x"][1]["y"]'),
    (rb'{"conf": {"x": 1e999}}', "NaN or Infinity"),
]


def _runs_total(client: TestClient) -> int:
    response = client.get(f"{V1}/dags/demo/runs")
    assert response.status_code == 200, response.text
    return int(response.json()["total"])


@pytest.mark.parametrize(("body", "needle"), POISON, ids=[b.decode() for b, _ in POISON])
def test_a_conf_that_cannot_be_read_back_is_422(client: TestClient, body: bytes, needle: str):
    response = client.post(f"{V1}/dags/demo/runs", content=body, headers=JSON)

    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert "\n" not in detail and detail.startswith("conf") and needle in detail, detail
    assert _runs_total(client) == 0
    ok = client.post(f"{V1}/dags/demo/runs", json={"conf": {"k": "é \u2603"}}, headers=AUTH)
    assert ok.status_code == 201 and ok.json()["conf"] == {"k": "é \u2603"}
    assert client.get(f"{V1}/dags/demo/runs/{ok.json()['run_id']}").status_code == 200


def test_conf_over_64_kib_is_422(client: TestClient) -> None:
    big = {"p": "x" * 65_536}
    response = client.post(f"{V1}/dags/demo/runs", json={"conf": big}, headers=AUTH)

    assert response.status_code == 422
    assert "SLUICE_MAX_CONF_BYTES" in response.json()["detail"]
    assert _runs_total(client) == 0


def test_the_conf_cap_is_a_setting(settings: Settings) -> None:
    capped = settings.with_(max_conf_bytes=20)
    for client in client_for(capped, ApiConfig(token=TOKEN)):
        at_cap = {"k": "x" * 12}  # {"k":"xxxxxxxxxxxx"}: 20 bytes
        over = {"k": "é" * 7}  # 21 bytes of UTF-8
        assert (
            client.post(f"{V1}/dags/demo/runs", json={"conf": over}, headers=AUTH).status_code
            == 422
        )
        made = client.post(f"{V1}/dags/demo/runs", json={"conf": at_cap}, headers=AUTH)
        assert made.status_code == 201, made.text
        assert _runs_total(client) == 1
    assert Settings.from_env({}).max_conf_bytes == 65_536
    assert Settings.from_env({"SLUICE_MAX_CONF_BYTES": "1024"}).max_conf_bytes == 1024


@pytest.mark.parametrize(
    ("run_id", "needle"),
    [
        (".", "only of dots"),
        ("..", "only of dots"),
        ("...", "only of dots"),
        ("a\u001b[31mred", "control characters"),
        ("tab\there", "control characters"),
        ("new\nline", "control characters"),
        ("del\u007f", "control characters"),
    ],
)
def test_run_ids_the_ui_cannot_name_are_422(client: TestClient, run_id: str, needle: str):
    response = client.post(f"{V1}/dags/demo/runs", json={"run_id": run_id}, headers=AUTH)

    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert detail.startswith("run_id") and needle in detail and "\n" not in detail
    assert _runs_total(client) == 0
    for fine in (".hidden", "a.b", "v1..2"):
        made = client.post(f"{V1}/dags/demo/runs", json={"run_id": fine}, headers=AUTH)
        assert made.status_code in (201, 409), made.text
    assert client.get(f"{V1}/dags/demo/runs/.hidden").status_code == 200


def test_lists_never_read_a_conf(client: TestClient, settings: Settings) -> None:
    made = client.post(f"{V1}/dags/demo/runs", json={"run_id": "p1"}, headers=AUTH)
    assert made.status_code == 201
    # a row written before conf was checked, which no response can hold
    engine = create_engine(settings.database_url)
    with engine.begin() as conn:
        conn.execute(text("""UPDATE dag_run SET conf = '{"k": "\\ud800"}' WHERE run_id = 'p1'"""))
    engine.dispose()
    statements: list[str] = []

    def seen(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        statements.append(statement)

    app_engine = client.app.state.sluice.engine  # type: ignore[attr-defined]
    event.listen(app_engine, "before_cursor_execute", seen)
    try:
        runs = client.get(f"{V1}/dags/demo/runs")
        dags = client.get(f"{V1}/dags")
        grid = client.get(f"{V1}/dags/demo/grid")
    finally:
        event.remove(app_engine, "before_cursor_execute", seen)

    assert (runs.status_code, dags.status_code, grid.status_code) == (200, 200, 200)
    assert [r["run_id"] for r in runs.json()["runs"]] == ["p1"]
    assert "conf" not in runs.json()["runs"][0]
    assert [r["run_id"] for r in json.loads(dags.text)["dags"][0]["recent_runs"]] == ["p1"]
    assert statements and not [s for s in statements if "conf" in s], statements
