"""Concurrency by key and rate limits on real processes (issue 44, items 4 and 5).

Real PostgreSQL, Redis, two `sluice scheduler` and `sluice worker -c 4`. Each task writes
its own start and end times to a file: what it saw is what is checked.
"""

from __future__ import annotations

import datetime as dt
import json
import signal
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
from tests.procs import Sluice, wait_until

KEYED = """
import json, pathlib, time
import sluice
from sluice import DAG, Param, task

TIMES = pathlib.Path({times!r})
GATE = pathlib.Path({gate!r})

with DAG("per_customer", schedule=None, params={{"customer": Param(type="string")}}):
    @task(concurrency=sluice.Concurrency(
        "per_customer", key=lambda ctx: ctx["params"]["customer"], limit=2))
    def work(context):
        customer = context["params"]["customer"]
        start = time.time()
        if customer == "gated":
            while not GATE.exists():
                time.sleep(0.05)
        else:
            time.sleep(1)
        name = f"{{context['run_id']}}.{{context['try_number']}}.json"
        (TIMES / name).write_text(json.dumps(
            {{"customer": customer, "start": start, "end": time.time()}}))
"""


def _client(sluice: Sluice) -> tuple[TestClient, dict[str, str]]:
    settings = Settings(
        database_url=sluice.database_url,
        broker_url=sluice.broker_url,
        namespace=sluice.namespace,
    )
    token = uuid.uuid4().hex
    app = create_app(settings, config=ApiConfig(token=token))
    return TestClient(app, raise_server_exceptions=False), {"Authorization": f"Bearer {token}"}


def _trigger(client: TestClient, auth: dict[str, str], dag_id: str, conf: dict[str, Any]) -> str:
    answer = client.post(f"/api/v1/dags/{dag_id}/runs", json={"conf": conf}, headers=auth)
    assert answer.status_code == 201, answer.text
    return str(answer.json()["run_id"])


def _most_at_once(spans: list[tuple[float, float]]) -> int:
    """The most spans open at one instant (an end before a start at the same time)."""
    edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def _keyed_tis(sluice: Sluice, state: str) -> list[tuple[Any, ...]]:
    return rows(
        sluice.database_url,
        "SELECT run_id, concurrency_key FROM task_instance "
        f"WHERE dag_id = 'per_customer' AND state = '{state}' ORDER BY id",
    )


@pytest.mark.long
@pytest.mark.timeout(180)
def test_concurrency_by_key_across_runs_and_a_killed_holder(sluice: Sluice, tmp_path: Path) -> None:
    times, gate = tmp_path / "times", tmp_path / "gate"
    times.mkdir()
    (sluice.dags_folder / "keyed.py").write_text(
        textwrap.dedent(KEYED.format(times=str(times), gate=str(gate)))
    )
    sluice.scheduler()
    sluice.scheduler()
    worker = sluice.worker(concurrency=4)
    wait_until(lambda: "per_customer" in sluice.run("dags", "list"), timeout=30)
    sluice.ok("dags", "unpause", "per_customer")
    client, auth = _client(sluice)
    with client:
        # three runs of a gated customer: two hold the slots, the third waits for one
        gated = [_trigger(client, auth, "per_customer", {"customer": "gated"}) for _ in range(3)]
        wait_until(lambda: len(_keyed_tis(sluice, "running")) == 2 or None, timeout=60)
        waiting = wait_until(lambda: _keyed_tis(sluice, "scheduled") or None, timeout=30)
        assert waiting == [(waiting[0][0], "gated")]
        holders = {run for run, _ in _keyed_tis(sluice, "running")}
        assert holders | {waiting[0][0]} == set(gated)
        explained = sluice.ok("tasks", "explain", "per_customer", waiting[0][0], "work")
        assert "per_customer" in explained and "'gated'" in explained, explained
        assert all(run in explained for run in holders), explained
        listed = json.loads(sluice.ok("concurrency", "list", "--json"))["keys"]
        assert [(k["name"], k["key"], k["held"], k["waiting"]) for k in listed] == [
            ("per_customer", "gated", 2, 1)
        ]
        assert {h["run_id"] for h in listed[0]["holders"]} == holders

        # the worker holding both slots is SIGKILLed: after the sweep its tries are
        # failed (no retries), the slots are free again, and the third run takes one
        sluice.stop(worker, signal.SIGKILL)
        gate.touch()
        sluice.worker(concurrency=4)
        waited = waiting[0][0]
        assert sluice.wait_run("per_customer", waited, timeout=60) == "success", sluice.logs()
        for run in holders:
            assert sluice.wait_run("per_customer", run, timeout=30) == "failed"
        wait_until(
            lambda: json.loads(sluice.ok("concurrency", "list", "--json"))["keys"] == [] or None,
            timeout=10,
        )

        # 12 runs of customers a and b, six each, one second each, 4 worker processes
        for name in [f.name for f in times.iterdir()]:
            (times / name).unlink()
        runs = [_trigger(client, auth, "per_customer", {"customer": c}) for c in ["a", "b"] * 6]
        for run in runs:
            assert sluice.wait_run("per_customer", run, timeout=90) == "success", sluice.logs()
    seen = [json.loads(f.read_text()) for f in times.iterdir()]
    assert len(seen) == 12
    most = {
        c: _most_at_once([(t["start"], t["end"]) for t in seen if t["customer"] == c])
        for c in ("a", "b")
    }
    assert most == {"a": 2, "b": 2}, most  # never more than 2; and the limit is not 1
    assert rows(
        sluice.database_url,
        "SELECT count(*) FROM task_instance WHERE state IN ('queued', 'running')",
    ) == [(0,)]


RATED = """
import json, pathlib, time
from datetime import timedelta
import sluice
from sluice import DAG, task

STARTS = pathlib.Path({starts!r})
API = sluice.RateLimit("api", 5, per=timedelta(seconds=1))
SLOW = sluice.RateLimit("slow", 1, per=timedelta(seconds=60))

def started(context):
    name = f"{{context['dag_id']}}.{{context['run_id']}}.{{context['task_id']}}"
    (STARTS / name).write_text(json.dumps(time.time()))

for dag_id, width in (("rated_one", 7), ("rated_two", 6)):
    with DAG(dag_id, schedule=None):
        for i in range(width):
            @task(task_id=f"call_{{i}}", rate_limit=API)
            def call(context):
                started(context)

with DAG("rated_slow", schedule=None):
    @task(rate_limit=SLOW)
    def first(context):
        started(context)

    @task(rate_limit=SLOW)
    def second(context):
        started(context)

    first >> second  # the worker's result leaves `second` to the schedulers' bucket
"""


@pytest.mark.timeout(180)
def test_one_token_bucket_shared_by_every_task_naming_it(sluice: Sluice, tmp_path: Path) -> None:
    starts = tmp_path / "starts"
    starts.mkdir()
    (sluice.dags_folder / "rated.py").write_text(textwrap.dedent(RATED.format(starts=str(starts))))
    sluice.scheduler()
    sluice.scheduler()
    sluice.worker(concurrency=4)
    wait_until(lambda: "rated_slow" in sluice.run("dags", "list"), timeout=30)
    for dag_id in ("rated_one", "rated_two", "rated_slow"):
        sluice.ok("dags", "unpause", dag_id)
    # 20 tasks in 3 runs of two DAGs, one bucket of 5 tokens refilled at 5 a second
    runs = [
        ("rated_one", sluice.trigger("rated_one")),
        ("rated_one", sluice.trigger("rated_one")),
        ("rated_two", sluice.trigger("rated_two")),
    ]
    for dag_id, run in runs:
        assert sluice.wait_run(dag_id, run, timeout=60) == "success", sluice.logs()
    times = sorted(
        json.loads(f.read_text()) for f in starts.iterdir() if f.name.startswith("rated_")
    )
    assert len(times) == 20
    # A token is taken when its task is queued: within any span of d seconds at most
    # 5 + 5·d tasks are queued (a pass's own clock both refills and stamps: 50 ms of
    # slack), and their starts follow (a busy worker can bunch them: 1 s of slack)
    stamped = rows(
        sluice.database_url,
        "SELECT queued_at FROM task_instance WHERE dag_id IN ('rated_one', 'rated_two')",
    )
    queued = sorted(at.timestamp() for (at,) in stamped if isinstance(at, dt.datetime))
    assert len(queued) == 20
    for stamps, slack in ((queued, 0.05), (times, 1.0)):
        for i in range(len(stamps)):
            for j in range(i, len(stamps)):
                d = stamps[j] - stamps[i]
                assert j - i + 1 <= 5 + 5 * (d + slack), (slack, i, j, d, stamps)
    # the bucket did hold them: 15 tokens after the first 5 take 3 s to come (the starts
    # with their 1 s of slack: a busy worker started the first ones late, once)
    assert queued[-1] - queued[0] >= (20 - 5) / 5 - 0.05, queued
    assert times[-1] - times[0] >= (20 - 5) / 5 - 1.0, times

    # a bucket of one token a minute, named by two chained tasks: one starts, the next waits
    slow = sluice.trigger("rated_slow")
    wait_until(lambda: _slow_starts(starts) or None, timeout=30)
    assert len(_slow_starts(starts)) == 1
    states = sluice.task_states("rated_slow", slow)
    waiting = next(t for t, s in states.items() if s["state"] != "success")
    assert states[waiting]["state"] == "scheduled", states
    explained = sluice.ok("tasks", "explain", "rated_slow", slow, waiting)
    assert "rate limit 'slow'" in explained and "no token" in explained, explained
    with pytest.raises(AssertionError):  # and it does not start for the next seconds
        wait_until(lambda: len(_slow_starts(starts)) > 1 or None, timeout=3)
    listed = json.loads(sluice.ok("concurrency", "list", "--json"))["rate_limits"]
    assert {b["name"]: b["limit"] for b in listed} == {"api": 5, "slow": 1}


def _slow_starts(starts: Path) -> list[str]:
    return [f.name for f in starts.iterdir() if f.name.startswith("rated_slow")]
