"""Connections and variables on real processes (issue 45): stored encrypted by the CLI,
read by tasks on a worker, masked in their logs (the table and the API's log route) and
errors; rotation to a new first key; and the CLI's refusals of what it cannot store.

Real PostgreSQL, Redis, `sluice scheduler`, `sluice worker`.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import textwrap
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any, cast
from unittest import mock
from urllib.parse import quote

import pytest
from cryptography.fernet import Fernet
from fastapi.testclient import TestClient

from sluice.scheduler.api.app import create_app
from sluice.scheduler.api.config import ApiConfig
from sluice.scheduler.cli.main import main
from sluice.scheduler.core.settings import Settings
from tests.api.test_browser import ServedApi, launched_browser, new_page
from tests.otlp_receiver import OtlpReceiver
from tests.procs import Sluice, wait_until

FIRST_KEY, NEW_KEY = Fernet.generate_key().decode(), Fernet.generate_key().decode()
DB_PASSWORD = "Db-Pa55@word/x"
ENV_PASSWORD = "env-pass/w0rd"
TOKEN = "tok-xyz-1234567890"
WAREHOUSE_URI = f"postgresql://etl:{quote(DB_PASSWORD, safe='')}@db.internal:5432/wh"
FROM_ENV_URI = f"postgresql://envuser:{quote(ENV_PASSWORD, safe='')}@envhost:6432/envdb"

DAGS = """
import json
from pathlib import Path
from sluice import DAG, Connection, Variable, task

CALLBACKS = Path(__file__).with_name("callbacks.jsonl")


def record(context):
    with open(CALLBACKS, "a") as out:
        out.write(json.dumps({"log_tail": context["log_tail"], "error": context["error"]}) + "\\n")


with DAG("reads", schedule=None) as dag:
    @task
    def show():
        db = Connection.get("warehouse")
        env = Connection.get("from_env")
        token = Variable.get("api_token")
        print("db password:", db.password, "uri:", db.uri)
        print("env password:", env.password, "uri:", env.uri)
        print("as json:", json.dumps({"db": db.password, "env": env.password, "token": token}))
        print("region:", Variable.get("region"), "token:", token)
        print("absent:", Variable.get("absent", default="fallback"))
        return [db.host, env.host, Variable.get("region")]

    @task(retries=0, on_failure_callback=record)
    def leak():
        print("trying with", Connection.get("warehouse").password)
        raise RuntimeError("login refused for " + Connection.get("warehouse").password)

    @task
    def hand():
        db = Connection.get("warehouse")
        return {"pw": db.password, "uri": db.uri, "token": Variable.get("api_token")}

    @task
    def take(handed):
        db = Connection.get("warehouse")
        return handed["pw"] == db.password and handed["token"] == Variable.get("api_token")

    take(hand())
"""

SECRETS = (DB_PASSWORD, ENV_PASSWORD, TOKEN, quote(DB_PASSWORD, safe=""))


def table(sluice: Sluice, name: str) -> dict[str, str]:
    """The stored values of a table, as the database holds them, by name."""
    key = "name" if name == "connection" else '"key"'
    with sluice._connect() as conn:
        return dict(conn.exec_driver_sql(f"SELECT {key}, value FROM {name}").all())  # noqa: S608


def logs_of(sluice: Sluice, run_id: str) -> dict[str, str]:
    with sluice._connect() as conn:
        rows = conn.exec_driver_sql(
            "SELECT t.task_id, l.content FROM task_log l JOIN task_instance t ON t.id = l.ti_id "
            f"WHERE t.run_id = '{run_id}'"
        ).all()
    return dict(rows)


def _lines(path: Path) -> list[dict[str, str]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def keyed_receiver() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver()
    yield receiver
    receiver.close()


@pytest.fixture
def keyed(sluice: Sluice, keyed_receiver: OtlpReceiver) -> Iterator[Sluice]:
    sluice.extra_env.update(SLUICE_FERNET_KEY=FIRST_KEY, SLUICE_CONN_FROM_ENV=FROM_ENV_URI)
    sluice.extra_env.update(
        OTEL_EXPORTER_OTLP_ENDPOINT=keyed_receiver.endpoint,
        OTEL_BSP_SCHEDULE_DELAY="100",
        OTEL_METRICS_EXPORTER="none",
    )
    yield sluice


@pytest.mark.long
@pytest.mark.timeout(170)
def test_tasks_read_connections_and_their_secrets_are_masked(
    keyed: Sluice, keyed_receiver: OtlpReceiver
) -> None:
    sluice = keyed
    # Given a connection and two variables stored by the CLI, and one connection in the env
    (sluice.dags_folder / "reads.py").write_text(textwrap.dedent(DAGS))
    sluice.ok("connections", "add", "warehouse", "--uri", WAREHOUSE_URI)
    sluice.ok("variables", "set", "api_token", TOKEN, "--secret")
    sluice.ok("variables", "set", "region", "eu-west-1")
    # the database holds no plaintext
    stored = {**table(sluice, "connection"), **table(sluice, "variable")}
    assert set(stored) == {"warehouse", "api_token", "region"}
    for token in stored.values():
        assert token.startswith("gAAAA")
        for plain in (*SECRETS, "db.internal", "eu-west-1"):  # long: never there by chance
            assert plain not in token
    # the CLI never shows a password, but gives a variable to the operator who asks
    listed = json.loads(sluice.ok("connections", "list", "--json"))
    assert listed == [
        {
            "name": "warehouse",
            "conn_type": "postgresql",
            "host": "db.internal",
            "port": 5432,
            "login": "etl",
            "password": "***",
            "schema": "wh",
        }
    ]
    shown = sluice.ok("connections", "list") + sluice.ok("variables", "list")
    assert not any(secret in shown for secret in SECRETS)
    assert "db.internal" in shown and "eu-west-1" in shown
    assert sluice.ok("variables", "get", "api_token") == TOKEN + "\n"
    assert json.loads(sluice.ok("variables", "list", "--json")) == [
        {"key": "api_token", "value": "***", "secret": True},
        {"key": "region", "value": "eu-west-1", "secret": False},
    ]

    # When a run's tasks read them on a real worker
    sluice.scheduler()
    worker = sluice.worker()
    wait_until(lambda: "reads" in sluice.run("dags", "list"), timeout=30)
    run_id = sluice.trigger("reads")
    assert sluice.wait_run("reads", run_id, timeout=60) == "failed", sluice.logs()
    states = sluice.db_task_states("reads", run_id)
    assert states["show"]["state"] == "success", states
    assert states["leak"]["state"] == "failed", states
    assert states["take"]["state"] == "success", states

    # Then the task log shows *** for every secret read, in every form printed
    logs = logs_of(sluice, run_id)
    for content in logs.values():
        assert not any(secret in content for secret in SECRETS), content
    show = logs["show"]
    assert "db password: *** uri: postgresql://etl:***@db.internal:5432/wh" in show
    assert "env password: *** uri: postgresql://envuser:***@envhost:6432/envdb" in show
    assert 'as json: {"db": "***", "env": "***", "token": "***"}' in show
    assert "region: eu-west-1 token: ***" in show and "absent: fallback" in show
    # and the error stored for the try that raised it
    assert states["leak"]["error"] == "RuntimeError: login refused for ***"
    # and so does the API's log route
    settings = Settings(database_url=sluice.database_url, broker_url=sluice.broker_url)
    with TestClient(create_app(settings)) as api:
        answer = api.get(f"/api/v1/dags/reads/runs/{run_id}/tasks/show/logs")
        assert answer.status_code == 200, answer.text
        content = answer.json()["content"]
        assert content == show and "***" in content
        assert not any(secret in answer.text for secret in SECRETS)
        leak = api.get(f"/api/v1/dags/reads/runs/{run_id}/tasks/leak/logs").text
        assert DB_PASSWORD not in leak and "login refused for ***" in leak
        # a result that holds secrets is shown masked, and handed down whole
        hand = api.get(f"/api/v1/dags/reads/runs/{run_id}/tasks/hand").json()
        assert json.loads(hand["result"]) == {
            "pw": "***",
            "uri": "postgresql://etl:***@db.internal:5432/wh",
            "token": "***",
        }
        take = api.get(f"/api/v1/dags/reads/runs/{run_id}/tasks/take").json()
        assert take["result"] == "true" and take["result_truncated"] is False
    # and so does the UI: the log of `show`, the result of `hand`
    _ui_shows_masked(settings, run_id, show)
    # the failure callback's log tail and error are masked
    called = wait_until(lambda: _lines(sluice.dags_folder / "callbacks.jsonl"), timeout=30)
    assert len(called) == 1 and "trying with ***" in called[0]["log_tail"], called
    assert called[0]["error"] == "RuntimeError: login refused for ***"
    assert not any(secret in json.dumps(called) for secret in SECRETS)
    # no span attribute holds a secret
    spans = wait_until(lambda: keyed_receiver.spans, timeout=30)
    shown = json.dumps([(span.name, span.attributes) for span in spans], default=str)
    assert "task leak" in shown and not any(secret in shown for secret in SECRETS)

    # When a new first key is put in front and every row is rotated
    sluice.extra_env["SLUICE_FERNET_KEY"] = f"{NEW_KEY},{FIRST_KEY}"
    before = {**table(sluice, "connection"), **table(sluice, "variable")}
    assert "1 connection(s), 2 variable(s)" in sluice.ok("secrets", "rotate")
    after = {**table(sluice, "connection"), **table(sluice, "variable")}
    # Then every ciphertext changed and the new key alone reads every value
    assert set(after) == set(before)
    assert all(after[name] != before[name] for name in before), (before, after)
    sluice.extra_env["SLUICE_FERNET_KEY"] = NEW_KEY
    assert sluice.ok("variables", "get", "api_token") == TOKEN + "\n"
    assert sluice.ok("variables", "get", "region") == "eu-west-1\n"
    assert json.loads(sluice.ok("connections", "list", "--json"))[0]["host"] == "db.internal"
    # a worker with the new key alone runs the tasks as before
    sluice.stop(worker)
    sluice.worker()
    again = sluice.trigger("reads")
    assert sluice.wait_run("reads", again, timeout=60) == "failed", sluice.logs()
    with sluice._connect() as conn:
        result = conn.exec_driver_sql(
            f"SELECT result FROM task_instance WHERE run_id = '{again}' AND task_id = 'show'"
        ).scalar()
    assert json.loads(str(result)) == ["db.internal", "envhost", "eu-west-1"]
    assert not any(secret in logs_of(sluice, again)["show"] for secret in SECRETS)


def _ui_shows_masked(settings: Settings, run_id: str, show_log: str) -> None:
    """The DAG page in headless Chromium: the task panel of `show` (its log) and of `hand`
    (its result) show `***` and no secret."""
    from playwright.sync_api import expect

    launch = cast(Generator[Any, None, None], launched_browser())
    with ServedApi(settings, ApiConfig()) as api:
        page, errors = new_page(next(launch))
        page.goto(f"{api.url}/dags/reads")
        page.locator(f'button.cell[data-task="show"][data-run="{run_id}"]').click()
        expect(page.locator("#log")).to_contain_text("db password: *** uri:")
        page.locator(f'button.cell[data-task="hand"][data-run="{run_id}"]').click()
        expect(page.locator("#panel-facts")).to_contain_text('"pw":"***"')
        shown = page.content()
        assert errors == []
    launch.close()
    assert "***" in show_log and not any(secret in shown for secret in SECRETS)


def cli(sluice: Sluice, *argv: str, **env: str) -> tuple[int, str, str]:
    """`sluice ARGV` run in this process (a new interpreter per refusal costs seconds of
    CPU), with the deployment's environment and `env`."""
    out, err = io.StringIO(), io.StringIO()
    with (
        mock.patch.dict(os.environ, {**sluice.env, **env}, clear=True),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def refused(done: tuple[int, str, str], needle: str) -> str:
    code, out, err = done
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1, done
    assert lines[0].startswith("sluice: error: ") and needle in lines[0], lines[0]
    return lines[0]


HOSTILE = [
    (["connections", "add", "w", "--uri", "db.internal:5432"], "type://login:password@"),
    (["connections", "add", "w", "--uri", "pg://u:pw@h:99999"], "port must be a number"),
    (["connections", "add", "w", "--uri", "pg://u:p#w@h"], "percent-encode it"),
    (["connections", "add", "w", "--uri", "pg://u:p\x1b[2Jw@h"], "control characters"),
    (["connections", "add", "w", "--uri", "pg://h/" + "x" * 70_000], "at most 65536 bytes"),
    (["connections", "add", "w", "--json", "{"], "--json is not valid JSON"),
    (["connections", "add", "w", "--json", '{"host": "h", "pw": "x"}'], "no field 'pw'"),
    (["connections", "add", "w", "--json", '{"port": "80"}'], "port must be a whole number"),
    (["connections", "add", "w", "--json", '{"extra": [1]}'], "extra must be a JSON object"),
    (["connections", "add", "w" * 251, "--uri", "pg://h"], "at most 250 characters"),
    (["connections", "add", "a\x1b[31mb", "--uri", "pg://h"], "control characters"),
    (["connections", "add", " w", "--uri", "pg://h"], "spaces"),
    (["variables", "set", "k" * 251, "v"], "at most 250 characters"),
    (["variables", "set", "k\x07", "v"], "control characters"),
    (["variables", "set", "k", "v" * 70_000], "at most 65536 bytes"),
    (["variables", "get", "absent"], "no variable 'absent' is stored"),
    (["connections", "delete", "absent"], "no connection 'absent' is stored"),
]


def test_the_cli_refuses_what_it_cannot_store_and_writes_nothing(keyed: Sluice) -> None:
    sluice = keyed
    # Without a key, nothing is stored: one line, exit 2, and no plaintext fallback
    sluice.ok("connections", "add", "w", "--uri", WAREHOUSE_URI)  # with the fixture's key
    sluice.extra_env.pop("SLUICE_FERNET_KEY")
    no_key = sluice.cli("connections", "add", "other", "--uri", WAREHOUSE_URI)
    done = (no_key.returncode, no_key.stdout, no_key.stderr)
    line = refused(done, "SLUICE_FERNET_KEY is not set")
    assert "never in plain text" in line and DB_PASSWORD not in line
    refused(cli(sluice, "variables", "set", "k", "v", "--secret"), "SLUICE_FERNET_KEY is not set")
    refused(cli(sluice, "variables", "set", "k", "v"), "SLUICE_FERNET_KEY is not set")
    refused(cli(sluice, "connections", "list"), "SLUICE_FERNET_KEY is not set")
    refused(cli(sluice, "secrets", "rotate"), "SLUICE_FERNET_KEY is not set")
    bad_key = cli(sluice, "connections", "add", "x", "--uri", "pg://h", SLUICE_FERNET_KEY="nokey")
    assert "nokey" not in refused(bad_key, "SLUICE_FERNET_KEY must be Fernet keys")
    assert set(table(sluice, "connection")) == {"w"} and table(sluice, "variable") == {}
    # With a key, each bad input is one line that names the problem, and nothing is written
    sluice.extra_env["SLUICE_FERNET_KEY"] = FIRST_KEY
    stored = table(sluice, "connection")
    for argv, needle in HOSTILE:
        line = refused(cli(sluice, *argv), needle)
        assert "\x1b" not in line and "p#w" not in line and len(line) < 300, line
    assert table(sluice, "connection") == stored and table(sluice, "variable") == {}
    # a name taken is refused, and the stored connection kept
    refused(cli(sluice, "connections", "add", "w", "--uri", "pg://other"), "exists")
    assert table(sluice, "connection") == stored
    # and deleting works, once
    assert cli(sluice, "connections", "delete", "w")[0] == 0
    refused(cli(sluice, "connections", "delete", "w"), "no connection 'w' is stored")
    assert table(sluice, "connection") == {}
