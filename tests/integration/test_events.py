"""Events and approvals on real processes: `sluice events send KEY` and `POST
/api/v1/events` resume exactly the tasks deferred on `sluice.triggers.Event(KEY)`, with
the payload as their `context["trigger_event"]`; an event sent after a run was queued but
before its task deferred still resumes it (the triggerer finds it stored), one sent before
the run was queued does not; bad input is refused with one line and writes nothing.

Real PostgreSQL, Redis, `sluice scheduler`, `sluice worker` and `sluice triggerer`; the API
in-process on the same database. A resumed task appends `[key, event]` (JSON) to a file.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from sluice.scheduler.api import create_app
from sluice.scheduler.api.config import ApiConfig
from sluice.scheduler.core.settings import Settings
from tests.api.conftest import AUTH, TOKEN
from tests.integration.test_deferral import count_in
from tests.procs import Sluice, wait_until

DAGS = """
import json, pathlib
import sluice
from sluice import DAG, task
from sluice.triggers import Event, FileExists

RECORD = pathlib.Path(RECORD_PATH)


def record(key, context):
    with RECORD.open("a") as f:
        f.write(json.dumps([key, context["trigger_event"]]) + "\\n")


with DAG("approvals", schedule=None) as approvals:
    @task
    def wait(key, context):
        if context["trigger_event"] is None:
            sluice.defer(Event(key))
        record(key, context)

    wait.expand(key=["k1", "k1", "k2"])

with DAG("late", schedule=None) as late:
    @task
    def gate(context):
        if context["trigger_event"] is None:
            sluice.defer(FileExists(GATE_PATH, poke_interval=0.2))

    @task
    def approval(context):
        if context["trigger_event"] is None:
            sluice.defer(Event("k3"))
        record("k3", context)

    gate >> approval

with DAG("too_early", schedule=None) as too_early:
    @task
    def waits_briefly(context):
        if context["trigger_event"] is None:
            sluice.defer(Event("early"), timeout=2)
        record("early", context)
"""


def write_dags(sluice: Sluice, tmp_path: Path) -> tuple[Path, Path]:
    """The DAG file; the record file and the gate file the `late` DAG's first task waits for."""
    record, gate = tmp_path / "record.txt", tmp_path / "gate"
    text = DAGS.replace("RECORD_PATH", repr(str(record))).replace("GATE_PATH", repr(str(gate)))
    (sluice.dags_folder / "approvals.py").write_text(textwrap.dedent(text))
    return record, gate


def recorded(record: Path) -> list[list[Any]]:
    lines = record.read_text().splitlines() if record.exists() else []
    return [json.loads(line) for line in lines]


def api_client(sluice: Sluice) -> TestClient:
    settings = Settings(
        database_url=sluice.database_url, broker_url=sluice.broker_url, namespace=sluice.namespace
    )
    return TestClient(create_app(settings, config=ApiConfig(token=TOKEN)))


DEFERRED = "SELECT count(*) FROM task_instance WHERE state = 'deferred'"


@pytest.mark.timeout(180)
def test_an_event_resumes_exactly_the_tasks_waiting_on_its_key(
    sluice: Sluice, tmp_path: Path
) -> None:
    record, _ = write_dags(sluice, tmp_path)
    sluice.scheduler()
    sluice.worker(concurrency=2)
    sluice.start("triggerer", "triggerer")  # it must neither run nor fail Event triggers
    run_id = sluice.trigger("approvals")
    wait_until(lambda: count_in(sluice, "SELECT count(*) FROM trigger") == 3, timeout=60)

    # When k1 is sent from the CLI: the two tasks on k1 resume, with its payload
    sent = sluice.ok("events", "send", "k1", "--payload", '{"approved": true, "by": "ann"}')
    assert sent.strip() == "resumed 2", sent
    wait_until(lambda: len(recorded(record)) == 2, timeout=60)
    assert recorded(record) == [["k1", {"approved": True, "by": "ann"}]] * 2
    assert count_in(sluice, DEFERRED) == 1  # k2's still waits
    assert sluice.ok("events", "send", "k1").strip() == "resumed 0"  # nothing waits on it

    # When k2 is sent through the API (no payload: {}): the last one resumes
    with api_client(sluice) as client:
        refused = client.post("/api/v1/events", json={"key": "k2"})
        assert refused.status_code == 401, refused.text
        answer = client.post("/api/v1/events", json={"key": "k2"}, headers=AUTH)
        assert answer.status_code == 200 and answer.json() == {"resumed": 1}, answer.text
    assert sluice.wait_run("approvals", run_id, timeout=60) == "success", sluice.logs()
    assert sorted(map(json.dumps, recorded(record)))[-1] == json.dumps(["k2", {}])
    assert count_in(sluice, "SELECT count(*) FROM event") == 3
    ti = sluice.db_task_states("approvals", run_id)
    assert all(row["try_number"] == 1 for row in ti.values()), ti


@pytest.mark.timeout(180)
def test_an_event_sent_before_the_task_deferred_still_resumes_it(
    sluice: Sluice, tmp_path: Path
) -> None:
    record, gate = write_dags(sluice, tmp_path)
    sluice.ok("events", "send", "early", "--payload", '{"too": "early"}')  # before the run
    sluice.scheduler()
    sluice.worker(concurrency=2)
    sluice.start("triggerer", "triggerer")
    run_id = sluice.trigger("late")
    early = sluice.trigger("too_early")
    # Given the run's first task waiting on a file, k3 is sent: nothing waits on it yet
    wait_until(lambda: count_in(sluice, "SELECT count(*) FROM trigger") >= 1, timeout=60)
    sent = sluice.ok("events", "send", "k3", "--payload", '{"approved": true}')
    assert sent.strip() == "resumed 0", sent
    # When the file comes: the approval task defers on k3, and the stored event resumes it
    gate.touch()
    assert sluice.wait_run("late", run_id, timeout=90) == "success", sluice.logs()
    assert ["k3", {"approved": True}] in recorded(record)
    # An event sent before a run was queued is not its: that task times out
    assert sluice.wait_run("too_early", early, timeout=60) == "failed", sluice.logs()
    ti = sluice.db_task_states("too_early", early)["waits_briefly"]
    assert "timed out" in (ti["error"] or ""), ti
    assert all(key != "early" for key, _ in recorded(record))


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["events", "send", ""], "an event key must be 1 to 250 characters"),
        (["events", "send", "x" * 251], "an event key must be 1 to 250 characters, got 251"),
        (["events", "send", "a\x01b"], "control characters (found U+0001)"),
        (["events", "send", "k", "--payload", "[1]"], "--payload must be a JSON object"),
        (["events", "send", "k", "--payload", "{bad"], "--payload is not valid JSON"),
        (["events", "send", "k", "--payload", '{"a": NaN}'], "NaN or Infinity"),
        (["events", "send", "k", "--payload", "[" * 40 + "]" * 40], "JSON object"),
        (["events", "send", "k", "--payload", '{"a":' * 40 + "1" + "}" * 40], "levels deep"),
        (["events", "send", "k", "--payload", json.dumps({"a": "x" * 70000})], "bytes of JSON"),
    ],
)
def test_the_cli_refuses_bad_events_in_one_line_and_writes_nothing(
    sluice: Sluice, args: list[str], said: str
) -> None:
    done = sluice.cli(*args)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stderr.count("\n") == 1 and said in done.stderr, done.stderr
    assert done.stdout == ""
    assert count_in(sluice, "SELECT count(*) FROM event") == 0


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ({"key": ""}, "key"),
        ({"key": "x" * 251}, "key"),
        ({"key": "a\nb"}, "control characters"),
        ({"key": "k", "payload": [1]}, "payload"),
        ({"key": "k", "payload": "yes"}, "payload"),
        ({"key": "k", "payload": {"a": "x" * 70000}}, "bytes of JSON"),
        ({"key": "k", "payload": json.loads('{"a":' * 40 + "1" + "}" * 40)}, "levels deep"),
        ({"key": "k", "extra": 1}, "extra"),
        ({"payload": {}}, "key"),
    ],
)
def test_the_api_refuses_bad_events_with_422_and_writes_nothing(
    sluice: Sluice, body: dict[str, Any], said: str
) -> None:
    with api_client(sluice) as client:
        answer = client.post("/api/v1/events", json=body, headers=AUTH)
    assert answer.status_code == 422, answer.text
    assert said in answer.json()["detail"], answer.json()
    assert count_in(sluice, "SELECT count(*) FROM event") == 0
