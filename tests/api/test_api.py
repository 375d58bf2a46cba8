"""The REST API against real PostgreSQL: status codes, bodies, errors and auth."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, select, text
from sqlalchemy.orm import Session

from sluice.scheduler.api.config import ApiConfig
from sluice.scheduler.core.db import make_session_factory, transaction
from sluice.scheduler.core.models import DagRun, TaskInstance
from sluice.scheduler.core.queries.task_logs import LogSnapshot, save_task_log
from sluice.scheduler.core.settings import Settings
from sluice.scheduler.core.states import TI, DagRunState
from sluice.scheduler.core.transitions import move_run, move_tis
from tests.api.conftest import AUTH, TOKEN, client_for

V1 = "/api/v1"


def trigger(client: TestClient, dag_id: str = "demo", **body: object) -> dict:
    response = client.post(f"{V1}/dags/{dag_id}/runs", json=body, headers=AUTH)
    assert response.status_code == 201, response.text
    return response.json()


def finish(settings: Settings, run_id: str, states: dict[str, TI], run_state: DagRunState) -> None:
    """Move a run's TIs and the run itself to the given states, as the pipeline would."""
    engine = create_engine(settings.database_url)
    with Session(engine) as session, session.begin():
        run = session.scalars(select(DagRun).where(DagRun.run_id == run_id)).one()
        now = dt.datetime.now(dt.UTC)
        move_run(session, run.id, DagRunState.RUNNING, expect=[DagRunState.QUEUED], now=now)
        for ti in session.scalars(select(TaskInstance).where(TaskInstance.dag_run_id == run.id)):
            new = states.get(ti.task_id)
            if new is None:
                continue
            for step in (TI.SCHEDULED, TI.QUEUED, TI.RUNNING):
                move_tis(session, [ti.id], step, expect=[ti.state], now=now, values=_try(step))
                ti.state = step
            move_tis(session, [ti.id], new, expect=[TI.RUNNING], now=now)
        if run_state is not DagRunState.RUNNING:
            move_run(session, run.id, run_state, expect=[DagRunState.RUNNING], now=now)
    engine.dispose()


def _try(step: TI) -> dict[str, object]:
    if step is TI.QUEUED:
        return {"try_number": TaskInstance.try_number + 1, "attempt_id": "a" * 36}
    if step is TI.RUNNING:
        return {"hostname": "worker-1"}
    return {}


# -- reads ---------------------------------------------------------------------------------


def test_list_dags_with_recent_runs_and_import_errors(client: TestClient) -> None:
    trigger(client, run_id="r1", logical_date="2026-02-01T00:00:00Z")
    trigger(client, run_id="r2", logical_date="2026-02-02T00:00:00Z")

    body = client.get(f"{V1}/dags").json()

    dags = {d["dag_id"]: d for d in body["dags"]}
    assert set(dags) == {"demo", "manual_only"}
    demo = dags["demo"]
    assert (demo["schedule"], demo["is_paused"], demo["task_count"]) == ("@daily", False, 4)
    # the next scheduled run: its logical date, and when it is created (its interval's end)
    logical = dt.datetime.fromisoformat(demo["next_dagrun"])
    created = dt.datetime.fromisoformat(demo["next_dagrun_create_after"])
    assert created - logical == dt.timedelta(days=1)
    assert dags["manual_only"]["next_dagrun_create_after"] is None
    assert [r["run_id"] for r in demo["recent_runs"]] == ["r2", "r1"]
    assert {r["state"] for r in demo["recent_runs"]} == {"queued"}
    assert dags["manual_only"]["schedule"] is None and dags["manual_only"]["recent_runs"] == []
    [broken] = body["import_errors"]
    assert broken["fileloc"].endswith("broken_dag.py")
    assert "this dag file is broken" in broken["error"]


def test_get_dag_lists_tasks_upstream_first(client: TestClient) -> None:
    body = client.get(f"{V1}/dags/demo").json()
    assert [t["task_id"] for t in body["tasks"]] == ["extract", "audit", "transform", "load"]
    transform = body["tasks"][2]
    assert (transform["upstream"], transform["downstream"], transform["retries"]) == (
        ["extract"],
        ["load"],
        1,
    )


def test_unknown_things_are_404_with_one_line(client: TestClient) -> None:
    trigger(client, run_id="r1")
    for path in (
        "/dags/nope",
        "/dags/nope/runs",
        "/dags/demo/runs/nope",
        "/dags/demo/runs/nope/tasks",
        "/dags/demo/runs/r1/tasks/nope",
        "/dags/demo/runs/r1/tasks/nope/logs",
        "/dags/demo/grid",  # exists: control
    ):
        response = client.get(V1 + path)
        if path.endswith("grid"):
            assert response.status_code == 200
            continue
        assert response.status_code == 404, path
        detail = response.json()["detail"]
        assert "nope" in detail and "\n" not in detail


def test_runs_filter_and_paginate(client: TestClient, settings: Settings) -> None:
    for day in range(1, 6):
        trigger(client, run_id=f"r{day}", logical_date=f"2026-03-0{day}")
    finish(settings, "r2", {"extract": TI.SUCCESS}, DagRunState.SUCCESS)

    page = client.get(f"{V1}/dags/demo/runs", params={"limit": 2, "offset": 1}).json()
    assert [r["run_id"] for r in page["runs"]] == ["r4", "r3"]
    assert (page["total"], page["limit"], page["offset"]) == (5, 2, 1)
    done = client.get(f"{V1}/dags/demo/runs", params={"state": "success"}).json()
    assert [r["run_id"] for r in done["runs"]] == ["r2"] and done["total"] == 1

    assert client.get(f"{V1}/dags/demo/runs", params={"state": "bogus"}).status_code == 422
    assert client.get(f"{V1}/dags/demo/runs", params={"limit": 0}).status_code == 422
    assert client.get(f"{V1}/dags/demo/runs", params={"offset": -1}).status_code == 422


def test_trigger_creates_a_queued_run_with_tis(client: TestClient) -> None:
    run = trigger(client, run_id="manual-1", conf={"x": [1, 2]}, logical_date="2026-01-31")

    assert run["run_id"] == "manual-1" and run["state"] == "queued"
    assert run["run_type"] == "manual" and run["conf"] == {"x": [1, 2]}
    assert run["logical_date"].startswith("2026-01-31T00:00:00")
    assert len(run["trace_id"]) == 32 and run["trace_url"] is None
    assert client.get(f"{V1}/dags/demo/runs/manual-1").json() == run
    tis = client.get(f"{V1}/dags/demo/runs/manual-1/tasks").json()["task_instances"]
    assert [t["task_id"] for t in tis] == ["extract", "audit", "transform", "load"]
    assert {t["state"] for t in tis} == {"none"}
    assert tis[2]["max_tries"] == 2


def test_trigger_defaults_run_id_and_date(client: TestClient) -> None:
    run = trigger(client)
    assert run["run_id"].startswith("manual__")
    assert run["run_id"] == f"manual__{dt.datetime.fromisoformat(run['logical_date']).isoformat()}"


def test_trigger_wakes_the_schedulers(client: TestClient, settings: Settings) -> None:
    from sluice.broker.wakeup import RedisWaker

    waker = RedisWaker(settings.broker_url, settings.namespace)
    try:
        waker.wait(0)  # subscribe before the wake-up is sent
        trigger(client)
        assert waker.wait(2.0)
    finally:
        waker.close()


def test_triggers_share_one_redis_connection_for_wake_ups(
    client: TestClient, settings: Settings
) -> None:
    """Each trigger wakes the schedulers through one waker the process keeps: a Redis
    connection per request cost a fifth of the trigger route (bench W3API)."""
    import redis

    for i in range(5):
        trigger(client, run_id=f"w{i}", logical_date=f"2026-02-0{i + 1}")
    server = redis.Redis.from_url(settings.broker_url)
    try:
        named = [c for c in server.client_list() if c.get("name") == f"{settings.namespace}-waker"]
    finally:
        server.close()
    assert len(named) == 1


def test_trigger_existing_run_is_409(client: TestClient) -> None:
    trigger(client, run_id="dup", logical_date="2026-01-01")
    same_id = client.post(f"{V1}/dags/demo/runs", json={"run_id": "dup"}, headers=AUTH)
    same_date = client.post(
        f"{V1}/dags/demo/runs", json={"logical_date": "2026-01-01T00:00:00+00:00"}, headers=AUTH
    )
    assert same_id.status_code == 409 and "already has a run" in same_id.json()["detail"]
    assert same_date.status_code == 409
    assert client.get(f"{V1}/dags/demo/runs").json()["total"] == 1


MALFORMED = [
    ({"conf": "not an object"}, "conf"),
    ({"conf": [1, 2]}, "conf"),
    ({"logical_date": "31/01/2026"}, "not an ISO 8601 date"),
    ({"logical_date": "0001-01-01T00:00:00+05:00"}, "out of range"),
    ({"run_id": ""}, "run_id"),
    ({"run_id": "   "}, "run_id"),
    ({"run_id": "a/b"}, "'/'"),
    ({"run_id": "x" * 251}, "run_id"),
    ({"run_id": "nul\u0000"}, "NUL"),
    ({"unknown": 1}, "unknown"),
    ({"run_id": 5}, "run_id"),
]


def test_malformed_trigger_is_422_and_writes_nothing(client: TestClient) -> None:
    for body, needle in MALFORMED:
        response = client.post(f"{V1}/dags/demo/runs", json=body, headers=AUTH)
        assert response.status_code == 422, (body, response.text)
        detail = response.json()["detail"]
        assert isinstance(detail, str) and "\n" not in detail and needle in detail, (body, detail)
    assert client.get(f"{V1}/dags/demo/runs").json()["total"] == 0


def test_body_that_is_not_json_is_422(client: TestClient) -> None:
    response = client.post(
        f"{V1}/dags/demo/runs",
        content=b"{not json",
        headers={**AUTH, "Content-Type": "application/json"},
    )
    assert response.status_code == 422
    assert response.json() == {"detail": "the body is not valid JSON"}


def test_pause_and_unpause(client: TestClient) -> None:
    paused = client.patch(f"{V1}/dags/demo", json={"is_paused": True}, headers=AUTH)
    assert paused.status_code == 200 and paused.json()["is_paused"] is True
    assert client.get(f"{V1}/dags/demo").json()["is_paused"] is True
    bad = client.patch(f"{V1}/dags/demo", json={"is_paused": "yes"}, headers=AUTH)
    assert bad.status_code == 422 and "is_paused" in bad.json()["detail"]
    missing = client.patch(f"{V1}/dags/nope", json={"is_paused": False}, headers=AUTH)
    assert missing.status_code == 404
    client.patch(f"{V1}/dags/demo", json={"is_paused": False}, headers=AUTH)
    assert client.get(f"{V1}/dags/demo").json()["is_paused"] is False


def test_clear_resets_the_task_and_requeues_the_run(client: TestClient, settings: Settings) -> None:
    trigger(client, run_id="c1")
    finish(
        settings,
        "c1",
        {"extract": TI.SUCCESS, "transform": TI.FAILED, "audit": TI.SUCCESS},
        DagRunState.FAILED,
    )

    response = client.post(
        f"{V1}/dags/demo/runs/c1/tasks/transform/clear", json={"downstream": True}, headers=AUTH
    )

    assert response.status_code == 200, response.text
    assert response.json() == {"cleared": 1, "run_state": "queued"}  # load was still none
    tis = client.get(f"{V1}/dags/demo/runs/c1/tasks").json()["task_instances"]
    states = {t["task_id"]: t for t in tis}
    assert {k: v["state"] for k, v in states.items()} == {
        "extract": "success",
        "audit": "success",
        "transform": "none",
        "load": "none",
    }
    # the cleared try keeps its number and gets its retries again
    assert (states["transform"]["try_number"], states["transform"]["max_tries"]) == (1, 3)
    detail = client.get(f"{V1}/dags/demo/runs/c1/tasks/transform").json()
    assert [(t["try_number"], t["state"]) for t in detail["tries"]] == [(1, None)]
    # the panel says why it waits: its run is queued again, not yet running
    assert detail["why"] and "queued" in detail["why"].lower()
    no_body = client.post(f"{V1}/dags/demo/runs/c1/tasks/extract/clear", headers=AUTH)
    assert no_body.json()["cleared"] == 1
    assert client.post(f"{V1}/dags/demo/runs/c1/tasks/nope/clear", headers=AUTH).status_code == 404


def test_task_detail_tries_and_logs(client: TestClient, settings: Settings) -> None:
    trigger(client, run_id="l1")
    finish(settings, "l1", {"extract": TI.SUCCESS}, DagRunState.RUNNING)
    engine = create_engine(settings.database_url)
    with Session(engine) as session, session.begin():
        ti = session.scalars(
            select(TaskInstance).where(
                TaskInstance.run_id == "l1", TaskInstance.task_id == "extract"
            )
        ).one()
        now = dt.datetime.now(dt.UTC)
        save_task_log(
            session,
            LogSnapshot(ti.id, 1, "a" * 36, "worker-1", "line one\nline two", 3, now, now),
            now=now,
        )
    engine.dispose()

    detail = client.get(f"{V1}/dags/demo/runs/l1/tasks/extract").json()
    assert detail["state"] == "success" and detail["hostname"] == "worker-1"
    assert detail["downstream"] == ["audit", "transform"]
    [only] = detail["tries"]
    assert only["try_number"] == 1 and only["has_log"] and only["state"] == "success"
    log = client.get(f"{V1}/dags/demo/runs/l1/tasks/extract/logs").json()
    assert log["content"] == "line one\nline two" and log["dropped_lines"] == 3
    assert log["try_number"] == 1 and log["hostname"] == "worker-1"
    by_number = client.get(f"{V1}/dags/demo/runs/l1/tasks/extract/logs?try_number=1")
    assert by_number.json() == log
    assert client.get(f"{V1}/dags/demo/runs/l1/tasks/extract/logs?try_number=2").status_code == 404
    assert client.get(f"{V1}/dags/demo/runs/l1/tasks/extract/logs?try_number=0").status_code == 422
    never = client.get(f"{V1}/dags/demo/runs/l1/tasks/load/logs")
    assert never.status_code == 404 and "has not run yet" in never.json()["detail"]


def test_grid_has_runs_oldest_first_and_cells(client: TestClient, settings: Settings) -> None:
    trigger(client, run_id="g1", logical_date="2026-01-01")
    trigger(client, run_id="g2", logical_date="2026-01-02")
    finish(
        settings,
        "g1",
        {t: TI.SUCCESS for t in ("extract", "transform", "load", "audit")},
        DagRunState.SUCCESS,
    )

    grid = client.get(f"{V1}/dags/demo/grid").json()

    assert grid["task_ids"] == ["extract", "audit", "transform", "load"]
    assert [r["run_id"] for r in grid["runs"]] == ["g1", "g2"]
    unmapped = {"mapped": None, "states": None}
    assert grid["runs"][0]["cells"]["load"] == {"state": "success", "try_number": 1, **unmapped}
    assert grid["runs"][1]["cells"]["load"] == {"state": "none", "try_number": 0, **unmapped}
    assert grid["active"] is True


def test_trace_link_from_the_template(settings: Settings) -> None:
    config = ApiConfig(token=TOKEN, trace_url="http://traces.local/trace/{trace_id}?x=1")
    for client in client_for(settings, config):
        run = trigger(client, run_id="t1")
        assert run["trace_url"] == f"http://traces.local/trace/{run['trace_id']}?x=1"
        detail = client.get(f"{V1}/dags/demo/runs/t1/tasks/extract").json()
        assert detail["trace_url"] == run["trace_url"]


# -- auth ----------------------------------------------------------------------------------

WRITES = [
    ("post", "/dags/demo/runs", {"run_id": "w"}),
    ("patch", "/dags/demo", {"is_paused": True}),
    ("post", "/dags/demo/runs/w/tasks/extract/clear", None),
]


def test_writes_need_the_token(client: TestClient) -> None:
    for method, path, body in WRITES:
        missing = client.request(method, V1 + path, json=body)
        wrong = client.request(method, V1 + path, json=body, headers={"Authorization": "Bearer no"})
        basic = client.request(
            method, V1 + path, json=body, headers={"Authorization": "Basic eDp5"}
        )
        for response in (missing, wrong, basic):
            assert response.status_code == 401, (method, path)
            assert response.headers["WWW-Authenticate"] == "Bearer"
    assert client.get(f"{V1}/dags/demo").json()["is_paused"] is False
    assert client.get(f"{V1}/dags/demo/runs").json()["total"] == 0


def test_without_a_token_configured_writes_are_refused(settings: Settings) -> None:
    # no SLUICE_API_TOKEN: a bearer value must be a user's token (`sluice tokens create`)
    for client in client_for(settings, ApiConfig(token=None)):
        for method, path, body in WRITES:
            response = client.request(method, V1 + path, json=body, headers=AUTH)
            assert response.status_code == 401, (method, path)
            assert "not valid" in response.json()["detail"]
        assert client.get(f"{V1}/dags").status_code == 200  # reads stay open


def test_read_auth(settings: Settings) -> None:
    for client in client_for(settings, ApiConfig(token=TOKEN, read_auth=True)):
        for path in ("/dags", "/dags/demo", "/dags/demo/runs", "/health"):
            assert client.get(V1 + path).status_code == 401, path
            assert client.get(V1 + path, headers=AUTH).status_code == 200, path
        # the pages themselves hold no data
        assert client.get("/").status_code == 200
    for client in client_for(settings, ApiConfig(token=None, read_auth=True)):
        assert client.get(f"{V1}/dags", headers=AUTH).status_code == 401  # no user's token
        response = client.get(f"{V1}/dags")
        assert response.status_code == 401 and "sluice tokens create" in response.json()["detail"]


def test_config_from_env() -> None:
    from sluice.scheduler.core.settings import ConfigError

    env = {
        "SLUICE_API_TOKEN": " s3 ",
        "SLUICE_API_READ_AUTH": "1",
        "SLUICE_TRACE_URL": "x/{trace_id}",
    }
    config = ApiConfig.from_env(env)
    assert config == ApiConfig(token="s3", read_auth=True, trace_url="x/{trace_id}")
    assert ApiConfig.from_env({}) == ApiConfig()
    with pytest.raises(ConfigError):
        ApiConfig.from_env({"SLUICE_TRACE_URL": "http://no-placeholder"})
    with pytest.raises(ConfigError):
        ApiConfig.from_env({"SLUICE_API_READ_AUTH": "maybe"})


# -- health and secrets --------------------------------------------------------------------


def test_health_reports_database_schedulers_and_workers(
    client: TestClient, settings: Settings
) -> None:
    engine = create_engine(settings.database_url)
    now = dt.datetime.now(dt.UTC)
    with transaction(make_session_factory(engine)) as session:
        session.execute(
            text(
                "INSERT INTO job (job_type, hostname, pid, state, start_date, latest_heartbeat)"
                " VALUES ('scheduler', 'h1', 1, 'running', :now, :now),"
                " ('scheduler', 'h2', 2, 'running', :now, :old),"
                " ('backfill', 'h3', 3, 'running', :now, :now)"
            ),
            {"now": now, "old": now - dt.timedelta(minutes=5)},
        )
    engine.dispose()

    response = client.get(f"{V1}/health")

    assert response.status_code == 200
    body = response.json()
    assert body["database"] == {"ok": True, "detail": "reachable"}
    assert [(s["hostname"], s["alive"]) for s in body["schedulers"]] == [
        ("h1", True),
        ("h2", False),
    ]
    assert body["schedulers_alive"] == 1
    assert body["workers"]["ok"] is False and body["workers"]["seen"] == []
    assert body["status"] == "degraded"


def test_health_when_database_and_broker_are_down(settings: Settings) -> None:
    down = settings.with_(
        database_url="postgresql+psycopg://sluice:hunter2@127.0.0.1:1/sluice",
        broker_url="redis://:hunter3@127.0.0.1:1/0",
    )
    for client in client_for(down, ApiConfig(token=TOKEN)):
        response = client.get(f"{V1}/health")
        assert response.status_code == 503
        body = response.json()
        assert body["status"] == "unavailable" and body["database"]["ok"] is False
        assert body["workers"]["ok"] is None and "broker unreachable" in body["workers"]["detail"]
        listing = client.get(f"{V1}/dags")
        assert listing.status_code == 503
        for text_ in (response.text, listing.text):
            for secret in ("hunter2", "hunter3", "sluice:", "127.0.0.1", "postgresql"):
                assert secret not in text_


def test_no_response_leaks_credentials(client: TestClient, settings: Settings) -> None:
    trigger(client, run_id="s1")
    secrets = {settings.database_url, settings.broker_url, "postgres@", "redis://"}
    for path in (
        "/openapi.json",
        f"{V1}/health",
        f"{V1}/dags",
        f"{V1}/dags/demo",
        f"{V1}/dags/demo/runs",
        f"{V1}/dags/demo/runs/s1",
        f"{V1}/dags/demo/runs/s1/tasks",
        f"{V1}/dags/demo/runs/s1/tasks/extract",
    ):
        body = client.get(path).text
        for secret in secrets:
            assert secret not in body, (path, secret)


def test_redis_down_does_not_break_writes(settings: Settings) -> None:
    down = settings.with_(broker_url="redis://127.0.0.1:1/0")
    for client in client_for(down, ApiConfig(token=TOKEN)):
        run = trigger(client, run_id="no-redis")
        assert run["state"] == "queued"


def test_openapi_spec_lists_the_endpoints(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    paths = spec["paths"]
    for path in (
        "/api/v1/health",
        "/api/v1/dags",
        "/api/v1/dags/{dag_id}",
        "/api/v1/dags/{dag_id}/runs",
        "/api/v1/dags/{dag_id}/runs/{run_id}",
        "/api/v1/dags/{dag_id}/runs/{run_id}/tasks",
        "/api/v1/dags/{dag_id}/runs/{run_id}/tasks/{task_id}/clear",
        "/api/v1/dags/{dag_id}/runs/{run_id}/tasks/{task_id}/logs",
    ):
        assert path in paths, path
    assert "HTTPBearer" in json.dumps(spec["components"]["securitySchemes"])
    assert client.get("/docs").status_code == 404  # would load scripts from a CDN


def test_ids_no_row_can_hold_are_404_not_500(client: TestClient) -> None:
    trigger(client, run_id="r1")
    for path in (
        "/dags/a%00b",
        "/dags/" + "x" * 300,
        "/dags/demo/runs/r%00",
        "/dags/demo/runs/r1/tasks/%00",
        "/dags/demo/runs/r1/tasks/%ED%A0%80",  # a lone surrogate, percent-encoded
    ):
        response = client.get(V1 + path)
        assert response.status_code == 404, (path, response.text)


def test_body_that_is_not_utf8_is_422(client: TestClient) -> None:
    response = client.patch(
        f"{V1}/dags/demo",
        content=b"\xff\xfe{",
        headers={**AUTH, "Content-Type": "application/json"},
    )
    assert response.status_code == 422
    assert response.json() == {"detail": "the body is not valid JSON"}
