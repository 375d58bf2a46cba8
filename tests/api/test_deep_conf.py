"""Finding 4.5, a conf nested hundreds of levels deep: the trigger answered 500 yet stored
the run, and every later GET of it answered 500. A conf deeper than SLUICE_MAX_CONF_DEPTH
(32) levels is refused, 422 from the API and exit 2 from the CLI, naming the limit, and
nothing is stored; and a request that answers an error commits nothing.
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from sluice.scheduler.api.config import ApiConfig
from sluice.scheduler.control import operations
from sluice.scheduler.control.inputs import InputError, check_conf, parse_conf
from sluice.scheduler.core.db import make_engine, make_session_factory, transaction, utcnow
from sluice.scheduler.core.models import AuditEvent, Dag, DagRun
from sluice.scheduler.core.settings import ConfigError, Settings
from tests.api.conftest import AUTH, TOKEN, client_for
from tests.procs import Sluice

V1 = "/api/v1"
JSON = {**AUTH, "Content-Type": "application/json"}


def nested(levels: int) -> str:
    """A conf of exactly `levels` levels as JSON text: the object, then lists in it."""
    return '{"x": ' + "[" * (levels - 1) + "1" + "]" * (levels - 1) + "}"


def runs_in(url: str) -> list[str]:
    engine = make_engine(url)
    try:
        with make_session_factory(engine)() as session:
            return sorted(session.scalars(select(DagRun.run_id)))
    finally:
        engine.dispose()


@pytest.mark.parametrize("levels", [33, 500, 900, 5000])
def test_deep_conf_is_422_naming_the_limit_and_stores_nothing(
    client: TestClient, settings: Settings, levels: int
) -> None:
    body = '{"run_id": "deep", "conf": ' + nested(levels) + "}"

    response = client.post(f"{V1}/dags/demo/runs", content=body, headers=JSON)

    assert response.status_code == 422, response.text[:300]
    detail = response.json()["detail"]
    assert "32" in detail and "SLUICE_MAX_CONF_DEPTH" in detail and "\n" not in detail, detail
    assert runs_in(settings.database_url) == []
    assert client.get(f"{V1}/dags/demo/runs/deep").status_code == 404


def test_a_conf_at_the_limit_is_stored_and_read_back(client: TestClient) -> None:
    made = client.post(
        f"{V1}/dags/demo/runs",
        content='{"run_id": "at32", "conf": ' + nested(32) + "}",
        headers=JSON,
    )
    assert made.status_code == 201, made.text[:300]
    read = client.get(f"{V1}/dags/demo/runs/at32")
    assert read.status_code == 200 and read.json()["conf"] == made.json()["conf"]


def test_the_depth_limit_is_a_setting(settings: Settings) -> None:
    assert Settings.from_env({}).max_conf_depth == 32
    assert Settings.from_env({"SLUICE_MAX_CONF_DEPTH": "4"}).max_conf_depth == 4
    for client in client_for(settings.with_(max_conf_depth=4), ApiConfig(token=TOKEN)):
        over = client.post(f"{V1}/dags/demo/runs", content=f'{{"conf": {nested(5)}}}', headers=JSON)
        assert over.status_code == 422 and "more than 4 levels" in over.json()["detail"]
        at = client.post(f"{V1}/dags/demo/runs", content=f'{{"conf": {nested(4)}}}', headers=JSON)
        assert at.status_code == 201, at.text


def test_depth_is_checked_without_recursion() -> None:
    """The checks shared by the CLI and the API: a conf nested far past what a recursive
    walk (or json.loads) survives is one InputError naming the limit, never RecursionError."""
    very_deep: object = 1
    for _ in range(100_000):
        very_deep = [very_deep]
    with pytest.raises(InputError, match="more than 32 levels deep.*SLUICE_MAX_CONF_DEPTH"):
        check_conf({"x": very_deep})
    with pytest.raises(InputError, match=r"32 levels.*SLUICE_MAX_CONF_DEPTH"):
        parse_conf(nested(100_000))
    expected: object = 1
    for _ in range(31):
        expected = [expected]
    assert parse_conf(nested(32)) == {"x": expected}


GOOD = """
from sluice import DAG, task
with DAG("good", schedule=None) as dag:
    @task
    def only():
        return 1
"""


@pytest.mark.parametrize("levels", [33, 900, 5000])
def test_cli_trigger_of_a_deep_conf_exits_2_with_one_line(sluice: Sluice, levels: int) -> None:
    (sluice.dags_folder / "good.py").write_text(GOOD)

    done = sluice.cli("dags", "trigger", "good", "--conf", nested(levels))

    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr[-500:])
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sluice: error: --conf"), done.stderr[-500:]
    assert "32" in lines[0] and "SLUICE_MAX_CONF_DEPTH" in lines[0]
    assert runs_in(sluice.database_url) == []
    assert sluice.ok("dags", "trigger", "good", "--conf", nested(32)).strip()
    assert len(runs_in(sluice.database_url)) == 1


def test_a_request_that_answers_an_error_commits_nothing(
    client: TestClient, settings: Settings
) -> None:
    """A route that fails after its write (here cancelling a run stored before the depth
    limit existed, whose conf no response can hold: the answer fails to serialize) is
    rolled back: the run is still queued and no audit event was kept."""
    engine = make_engine(settings.database_url)
    factory = make_session_factory(engine)
    try:
        with transaction(factory) as session:
            dag = session.get(Dag, "demo")
            assert dag is not None
            deep: object = 1
            for _ in range(899):
                deep = [deep]
            operations.trigger_run(session, dag, now=utcnow(), run_id="old", conf={"x": deep})

        cancelled = client.post(f"{V1}/dags/demo/runs/old/cancel", headers=AUTH)

        assert cancelled.status_code == 500, cancelled.text[:300]
        with factory() as session:
            state = session.scalar(select(DagRun.state).where(DagRun.run_id == "old"))
            events = session.scalar(select(func.count()).select_from(AuditEvent))
        assert (state, events) == ("queued", 0)
    finally:
        engine.dispose()


def test_the_depth_limit_has_a_ceiling_pydantic_can_answer() -> None:
    with pytest.raises(ConfigError, match="SLUICE_MAX_CONF_DEPTH must be at most 200"):
        Settings.from_env({"SLUICE_MAX_CONF_DEPTH": "300"})


DEEP = "[" * 900 + "]" * 900
WRITES = [
    ("put", "/dags/demo/runs/r1/note", '{"note": %s}'),
    ("put", "/dags/demo/runs/r1/tasks/extract/note", '{"note": %s}'),
    ("post", "/dags/demo/runs/r1/mark", '{"state": %s}'),
    ("post", "/dags/demo/runs/r1/tasks/extract/mark", '{"state": "success", "x": %s}'),
    ("post", "/dags/demo/runs/r1/tasks/extract/clear", '{"map_index": %s}'),
    ("patch", "/dags/demo", '{"is_paused": %s}'),
    ("post", "/dags/demo/runs", '{"run_id": %s}'),
]


@pytest.mark.parametrize(("method", "path", "body"), WRITES, ids=[f"{m} {p}" for m, p, _ in WRITES])
def test_deep_json_in_any_other_body_is_422_and_stores_nothing(
    client: TestClient, settings: Settings, method: str, path: str, body: str
) -> None:
    """The other bodies hold no free-form JSON (their fields are typed, extra fields are
    refused): deep JSON anywhere in them is a 422, and nothing is written."""
    made = client.post(f"{V1}/dags/demo/runs", json={"run_id": "r1"}, headers=AUTH)
    assert made.status_code == 201

    response = client.request(method, V1 + path, content=body % DEEP, headers=JSON)

    assert response.status_code == 422, response.text[:300]
    assert "\n" not in response.json()["detail"]
    assert runs_in(settings.database_url) == ["r1"]
    engine = make_engine(settings.database_url)
    try:
        with make_session_factory(engine)() as session:
            assert session.scalar(select(func.count()).select_from(AuditEvent)) == 0
            assert session.scalar(select(DagRun.state)) == "queued"
            assert session.scalar(select(Dag.is_paused).where(Dag.dag_id == "demo")) is False
    finally:
        engine.dispose()
