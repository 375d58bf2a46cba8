"""Assets on real processes: a producing task's success records an asset event with its
result, and each event triggers each DAG scheduled on the asset exactly once, under two
schedulers; conditional schedules; events sent from outside by the CLI and the REST API.

Real PostgreSQL, Redis, two `sluice scheduler` and a `sluice worker`.
"""

from __future__ import annotations

import functools
import json
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from sluice.scheduler.api.app import create_app
from sluice.scheduler.api.config import ApiConfig
from sluice.scheduler.core.settings import Settings
from tests.integration.test_cancel_run import rows
from tests.integration.test_standalone import background, env_for, rows_once_there
from tests.procs import Sluice, run_sluice, wait_until

DAGS = """
import sluice
from sluice import DAG, task

raw = sluice.Asset("s3://bucket/raw/")
a, b, c = sluice.Asset("mem://a"), sluice.Asset("mem://b"), sluice.Asset("mem://c")

with DAG("producer", schedule=None):
    @task(outlets=[raw])
    def load(context):
        context["outlet_events"][raw]["extra"] = {"rows": int(context["conf"].get("rows", 0))}

with DAG("consumer", schedule=raw):
    @task
    def read(context):
        return context["triggering_asset_events"]

with DAG("conditional", schedule=(a | b) & c):
    @task
    def both(context):
        return [e["uri"] for e in context["triggering_asset_events"]]
"""


def runs_of(sluice: Sluice, dag_id: str) -> list[dict[str, Any]]:
    with sluice._connect() as conn:
        rows = conn.exec_driver_sql(
            "SELECT r.run_id, r.run_type, r.state, t.result FROM dag_run r "
            "JOIN task_instance t ON t.dag_run_id = r.id "
            f"WHERE r.dag_id = '{dag_id}' ORDER BY r.id"
        ).all()
    return [
        {
            "run_id": run_id,
            "run_type": run_type,
            "state": state,
            "result": json.loads(result) if result else None,
        }
        for run_id, run_type, state, result in rows
    ]


def all_succeeded(sluice: Sluice, dag_id: str, count: int) -> list[dict[str, Any]] | None:
    runs = runs_of(sluice, dag_id)
    return runs if len(runs) == count and all(r["state"] == "success" for r in runs) else None


@pytest.mark.timeout(150)
def test_each_producer_run_triggers_the_consumer_exactly_once(sluice: Sluice) -> None:
    (sluice.dags_folder / "assets.py").write_text(textwrap.dedent(DAGS))
    sluice.scheduler()
    sluice.scheduler()
    sluice.worker()
    wait_until(lambda: "consumer" in sluice.run("dags", "list"), timeout=30)
    produced = []
    for i in range(5):  # events queued together would make one run: one at a time
        run_id = sluice.trigger("producer", "--conf", json.dumps({"rows": i}))
        produced.append(run_id)
        assert sluice.wait_run("producer", run_id, timeout=60) == "success", sluice.logs()
        wait_until(functools.partial(all_succeeded, sluice, "consumer", i + 1), timeout=30)
    runs = wait_until(lambda: all_succeeded(sluice, "consumer", 5), timeout=5)
    assert all(r["run_type"] == "asset_triggered" for r in runs)
    seen = []
    for run in runs:
        events = run["result"]
        assert len(events) == 1, runs
        event = events[0]
        assert set(event) == {
            "uri",
            "extra",
            "source_dag_id",
            "source_run_id",
            "source_task_id",
            "timestamp",
        }
        assert event["uri"] == "s3://bucket/raw/"
        assert event["source_dag_id"] == "producer" and event["source_task_id"] == "load"
        seen.append((event["source_run_id"], event["extra"]["rows"]))
    assert sorted(seen) == sorted(zip(produced, range(5), strict=True))
    # no more runs come: each event triggered the consumer once
    listed = json.loads(sluice.ok("assets", "list", "--json"))
    raw = next(a for a in listed if a["uri"] == "s3://bucket/raw/")
    assert raw["producers"] == ["producer.load"] and raw["consumers"] == ["consumer"]
    assert raw["events"] == 5 and raw["last_event"]["source_run_id"] == produced[-1]
    assert len(runs_of(sluice, "consumer")) == 5


@pytest.mark.timeout(150)
def test_conditions_and_events_sent_from_outside(sluice: Sluice) -> None:
    (sluice.dags_folder / "assets.py").write_text(textwrap.dedent(DAGS))
    sluice.scheduler()
    sluice.worker()
    wait_until(lambda: "conditional" in sluice.run("dags", "list"), timeout=30)
    # (a | b) & c: an event on b alone makes no run
    sluice.ok("assets", "event", "mem://b")
    with pytest.raises(AssertionError):
        wait_until(lambda: runs_of(sluice, "conditional") or None, timeout=3)
    # a and c: one run, which consumes the three events
    sluice.ok("assets", "event", "mem://a", "--extra", '{"k": 1}')
    sluice.ok("assets", "event", "mem://c")
    runs = wait_until(lambda: all_succeeded(sluice, "conditional", 1), timeout=30)
    assert runs[0]["result"] == ["mem://b", "mem://a", "mem://c"]

    # the CLI and the API each trigger the consumer once
    sluice.ok("assets", "event", "s3://bucket/raw/", "--extra", '{"by": "cli"}')
    wait_until(lambda: all_succeeded(sluice, "consumer", 1), timeout=30)
    settings = Settings(
        database_url=sluice.database_url,
        broker_url=sluice.broker_url,
        namespace=sluice.namespace,
    )
    token = uuid.uuid4().hex
    app = create_app(settings, config=ApiConfig(token=token))
    with TestClient(app, raise_server_exceptions=False) as client:
        body = {"uri": "s3://bucket/raw/", "extra": {"by": "api"}}
        assert client.post("/api/v1/assets/events", json=body).status_code == 401
        auth = {"Authorization": f"Bearer {token}"}
        answer = client.post("/api/v1/assets/events", json=body, headers=auth)
        assert answer.status_code == 200, answer.text
        bad = client.post(
            "/api/v1/assets/events", json={"uri": " padded", "extra": {}}, headers=auth
        )
        assert bad.status_code == 422 and "spaces" in bad.text
        runs = wait_until(lambda: all_succeeded(sluice, "consumer", 2), timeout=30)
        extras = [r["result"][0]["extra"]["by"] for r in runs]
        assert sorted(extras) == ["api", "cli"]
        listed = client.get("/api/v1/assets").json()["assets"]
        assert {a["uri"] for a in listed} >= {"s3://bucket/raw/", "mem://a", "mem://b"}
        detail = client.get("/api/v1/dags/conditional").json()
        assert detail["consumes"] == ["mem://a", "mem://b", "mem://c"]
        assert client.get("/api/v1/dags/producer").json()["produces"] == ["s3://bucket/raw/"]
    bad_cli = sluice.cli("assets", "event", "mem://a", "--extra", "[1]")
    assert bad_cli.returncode == 2 and len(bad_cli.stderr.strip().splitlines()) == 1


EMBEDDED = """
import pathlib
from datetime import timedelta
import sluice
from sluice import DAG, task

raw = sluice.Asset("file:///raw")
INBOX = pathlib.Path({inbox!r})

def files(context):
    for path in sorted(INBOX.iterdir()):
        yield sluice.RunRequest(run_key=path.name, conf={{"file": path.name}})

with DAG("producer", schedule=None):
    @task(outlets=[raw])
    def load(context):
        context["outlet_events"][raw]["extra"] = {{"by": "task"}}

with DAG("consumer", schedule=raw):
    @task
    def read(context):
        return [e["extra"]["by"] for e in context["triggering_asset_events"]]

with DAG("watched", schedule=sluice.Watch(files, interval=timedelta(seconds=0.5))):
    @task
    def process(context):
        return context["conf"]["file"]
"""


@pytest.mark.timeout(150)
def test_assets_and_watches_on_the_embedded_default(tmp_path: Path) -> None:
    """`sluice standalone` on SQLite: a producer's success and a CLI event each make a
    run of the consumer; a watch's files each make one run."""
    dags, inbox = tmp_path / "dags", tmp_path / "inbox"
    dags.mkdir()
    inbox.mkdir()
    (dags / "world.py").write_text(textwrap.dedent(EMBEDDED.format(inbox=str(inbox))))
    url = f"sqlite:///{tmp_path / 'sluice.db'}"
    env = env_for(url, dags)

    def cli(*args: str) -> str:
        done = run_sluice(*args, env=env, cwd=tmp_path, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def states(dag_id: str) -> list[tuple[object, ...]] | None:
        return rows_once_there(url, f"SELECT state FROM dag_run WHERE dag_id = '{dag_id}'")

    with background(tmp_path, env) as started:
        wait_until(lambda: "dags trigger" in started.stderr(), timeout=60)
        cli("dags", "trigger", "producer")
        wait_until(lambda: states("consumer") == [("success",)], timeout=30)
        cli("assets", "event", "file:///raw", "--extra", '{"by": "cli"}')
        wait_until(lambda: states("consumer") == [("success",)] * 2, timeout=30)
        for name in ("one.fastq", "two.fastq"):
            (inbox / name).write_text("ACGT")
        wait_until(lambda: states("watched") == [("success",)] * 2, timeout=30)
        results = rows(
            url,
            "SELECT t.result FROM task_instance t JOIN dag_run r ON r.id = t.dag_run_id "
            "WHERE r.dag_id = 'consumer' ORDER BY r.id",
        )
        assert [json.loads(str(r[0])) for r in results] == [["task"], ["cli"]]
        assert started.proc.poll() is None
