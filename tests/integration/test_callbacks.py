"""Task and DAG callbacks on real schedulers and workers: each state move that has a
callback runs it exactly once, on a worker, with its context, whatever ends the state
(a worker's result, the sweep of a killed worker) and whatever fails on the way (a
scheduler killed, the broker flushed, two schedulers); the webhook notifier posts JSON.
Each callback appends one line per execution to a file, so a duplicate shows."""

from __future__ import annotations

import json
import signal
import textwrap
import threading
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.integration.test_cancel_run import rows
from tests.procs import Sluice, wait_until

DAG = """
import json
import time
from datetime import timedelta
from pathlib import Path
from sluice import DAG, Webhook, task

LINES = Path({marks!r}) / "callbacks.jsonl"
KEYS = ("kind", "task_id", "try_number", "state", "error", "log_tail", "url", "dag_id", "run_id")


def record(context):
    with open(LINES, "a") as out:
        out.write(json.dumps({{k: context[k] for k in KEYS}}) + "\\n")


def run_failed(context):
    record(context)
    Webhook("HOOK_URL")(context)


with DAG("alerts", schedule=None, on_failure_callback=run_failed) as dag:
    @task(on_success_callback=record)
    def ok():
        print("ok ran")

    @task(retries=1, retry_delay=0, on_retry_callback=record, on_failure_callback=record)
    def bad():
        print("about to fail")
        raise ValueError("boom")

    ok >> bad

with DAG("late", schedule=None, deadline=timedelta(seconds=1), on_deadline_missed=record) as late:
    @task
    def takes_3s():
        time.sleep(3)

with DAG("hangs", schedule=None) as other:
    @task(on_failure_callback=record)
    def hang():
        time.sleep(60)
"""


class Hook(BaseHTTPRequestHandler):
    bodies: list[dict[str, Any]] = []

    def do_POST(self) -> None:  # noqa: N802 - the http.server API
        length = int(self.headers["Content-Length"])
        Hook.bodies.append(json.loads(self.rfile.read(length)))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def hook() -> Iterator[str]:
    """A webhook receiver on a free port; its URL."""
    Hook.bodies = []
    server = HTTPServer(("127.0.0.1", 0), Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    server.shutdown()
    server.server_close()


def setup(sluice: Sluice, tmp_path: Path, hook: str) -> Path:
    marks = tmp_path / "marks"
    marks.mkdir()
    (sluice.dags_folder / "alerts.py").write_text(textwrap.dedent(DAG.format(marks=str(marks))))
    sluice.extra_env.update(HOOK_URL=hook, SLUICE_BASE_URL="http://sluice.example:8080")
    sluice.run("dags", "list")
    return marks


def lines(marks: Path) -> list[dict[str, Any]]:
    path = marks / "callbacks.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def kinds(marks: Path) -> Counter[tuple[str, str | None, int | None]]:
    return Counter((x["kind"], x["task_id"], x["try_number"]) for x in lines(marks))


EXPECTED = Counter(
    {
        ("on_success", "ok", 1): 1,
        ("on_retry", "bad", 1): 1,
        ("on_failure", "bad", 2): 1,
        ("on_failure", None, None): 1,
    }
)


def statuses(sluice: Sluice) -> Counter[str]:
    return Counter(
        str(s) for (s,) in rows(sluice.database_url, "SELECT status FROM callback ORDER BY id")
    )


def test_each_callback_runs_once_with_its_context(
    sluice: Sluice, tmp_path: Path, hook: str
) -> None:
    marks = setup(sluice, tmp_path, hook)
    sluice.scheduler()
    sluice.worker()
    run_id = sluice.trigger("alerts")
    late = sluice.trigger("late")
    assert sluice.wait_run("alerts", run_id) == "failed"
    # a run past its deadline fires on_deadline_missed once, and goes on to succeed
    assert sluice.wait_run("late", late) == "success"
    wait_until(lambda: statuses(sluice) == Counter(delivered=5), timeout=30)
    assert kinds(marks) == EXPECTED + Counter({("on_deadline_missed", None, None): 1})
    [missed] = [x for x in lines(marks) if x["kind"] == "on_deadline_missed"]
    assert (missed["run_id"], missed["state"]) == (late, "running")
    by_kind = {(x["kind"], x["task_id"]): x for x in lines(marks)}
    retry = by_kind["on_retry", "bad"]
    assert (retry["state"], retry["error"]) == ("up_for_retry", "ValueError: boom")
    assert "about to fail" in retry["log_tail"]
    assert retry["url"] == "http://sluice.example:8080/dags/alerts"
    assert by_kind["on_success", "ok"]["state"] == "success"
    run_end = by_kind["on_failure", None]
    assert (run_end["state"], run_end["run_id"]) == ("failed", run_id)
    assert run_end["error"] == "ValueError: boom"
    # the webhook got the run's failure once, as Slack-compatible JSON
    [posted] = Hook.bodies
    assert posted["dag_id"] == "alerts" and posted["state"] == "failed"
    assert "alerts" in posted["text"] and "boom" in posted["text"]
    report = json.loads(sluice.ok("status", "--json", "--workers-timeout", "0"))
    assert report["callbacks"]["delivered"] == 5 and report["callbacks"]["pending"] == 0


def test_callbacks_survive_killed_workers_schedulers_and_a_flushed_broker(
    sluice: Sluice, tmp_path: Path, hook: str
) -> None:
    marks = setup(sluice, tmp_path, hook)
    sluice.extra_env["SLUICE_QUEUED_TIMEOUT"] = "2"  # lost messages are published again soon
    first = sluice.scheduler()
    sluice.scheduler()
    tasks_only = sluice.start("worker", "worker", "-Q", "default", "-c", "2", "--without-callbacks")
    # a worker SIGKILLed mid-task: the sweep fails the task, its on_failure becomes due
    hung = sluice.trigger("hangs")
    wait_until(lambda: sluice.db_task_states("hangs", hung)["hang"]["state"] == "running")
    sluice.stop(tasks_only, signal.SIGKILL)
    tasks_only = sluice.start("worker", "worker", "-Q", "default", "-c", "2", "--without-callbacks")
    run_id = sluice.trigger("alerts")
    assert sluice.wait_run("alerts", run_id) == "failed"
    assert sluice.wait_run("hangs", hung) == "failed"
    # every callback is published, and no worker serves the callback queue yet
    wait_until(lambda: statuses(sluice) == Counter(queued=5), timeout=30)
    # one scheduler is SIGKILLed and the broker loses every message
    sluice.stop(first, signal.SIGKILL)
    broker = redis.Redis.from_url(sluice.broker_url)
    broker.flushdb()
    broker.close()
    [(flushed,)] = rows(sluice.database_url, "SELECT now()")
    # the other scheduler publishes each again, every 2 s while nobody claims it: once all
    # were published over 2.5 s after the flush, each has two messages in the queue
    again = (
        "SELECT count(*) FROM callback "
        f"WHERE published_at > TIMESTAMPTZ '{flushed}' + INTERVAL '2.5 seconds'"
    )
    wait_until(lambda: rows(sluice.database_url, again) == [(5,)], timeout=30)
    # a worker for callbacks comes: it runs each once
    sluice.worker()
    wait_until(lambda: statuses(sluice) == Counter(delivered=5), timeout=30)
    assert kinds(marks) == EXPECTED + Counter({("on_failure", "hang", 1): 1})  # no deadline run
    [hang] = [x for x in lines(marks) if x["task_id"] == "hang"]
    assert "heartbeating" in hang["error"]
    # the messages published before a re-publish were stale when they came: none ran
    assert "stale callback message" in logs(sluice)


def logs(sluice: Sluice) -> str:
    return "".join(p.read_text(errors="replace") for p in sluice.log_dir.glob("*.log"))
