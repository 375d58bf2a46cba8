"""Finding 4.8: JSON and static responses lacked `X-Content-Type-Options: nosniff`. Every
response of the app, the error responses included (401, 404, 413, 422, 500), carries it,
with `Referrer-Policy: no-referrer` and a Content-Security-Policy with
`frame-ancestors 'none'`; the UI pages keep their own policy.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from sluice.scheduler.api.config import ApiConfig
from sluice.scheduler.control import operations
from sluice.scheduler.core.db import make_engine, make_session_factory, transaction, utcnow
from sluice.scheduler.core.models import Dag
from sluice.scheduler.core.settings import Settings
from tests.api.conftest import AUTH, TOKEN, client_for

V1 = "/api/v1"
LIMIT = 4096


@pytest.fixture
def api(settings: Settings) -> Iterator[TestClient]:
    """The API with a token and a small body limit, holding a run `r1` and a run `unreadable`
    whose conf (stored before confs were checked) no response can hold."""
    engine = make_engine(settings.database_url)
    try:
        with transaction(make_session_factory(engine)) as session:
            dag = session.get(Dag, "demo")
            assert dag is not None
            operations.trigger_run(session, dag, now=utcnow(), run_id="r1")
            deep: object = 1
            for _ in range(900):
                deep = [deep]
            operations.trigger_run(
                session, dag, now=utcnow(), run_id="unreadable", conf={"x": deep}
            )
    finally:
        engine.dispose()
    yield from client_for(settings, ApiConfig(token=TOKEN, max_body_bytes=LIMIT))


CASES = {
    "json": ("get", f"{V1}/dags/demo/runs", {}, None, 200),
    "static asset": ("get", "/static/dag.js", {}, None, 200),
    "ui page": ("get", "/dags/demo", {}, None, 200),
    "openapi": ("get", "/openapi.json", {}, None, 200),
    "401": ("post", f"{V1}/dags/demo/runs", {}, {"run_id": "x"}, 401),
    "404": ("get", f"{V1}/dags/nope", {}, None, 404),
    "404 static": ("get", "/static/nope.js", {}, None, 404),
    "413": ("post", f"{V1}/dags/demo/runs", AUTH, {"conf": {"p": "x" * LIMIT}}, 413),
    "422": ("get", f"{V1}/dags/demo/runs?limit=0", {}, None, 422),
    "500": ("get", f"{V1}/dags/demo/runs/unreadable", {}, None, 500),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_every_response_carries_the_security_headers(
    api: TestClient, case: tuple[str, str, dict[str, str], object, int]
) -> None:
    method, path, headers, body, status = case

    response = api.request(method, path, headers=headers, json=body)

    assert response.status_code == status, response.text[:300]
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.headers["Referrer-Policy"] == "no-referrer"
    policy = response.headers["Content-Security-Policy"]
    assert "frame-ancestors 'none'" in policy, policy
    assert response.headers.get_list("Content-Security-Policy") == [policy]


def test_the_ui_pages_keep_their_policy(api: TestClient) -> None:
    for path in ("/", "/dags/demo"):
        policy = api.get(path).headers["Content-Security-Policy"]
        assert "script-src 'self'" in policy and "connect-src 'self'" in policy, policy
        assert "frame-ancestors 'none'" in policy
    assert api.get(f"{V1}/dags").headers["Content-Security-Policy"].startswith("default-src 'none'")
