"""The Python client (`sluice.client`) against a live `sluice api`: it triggers a run,
waits for it and reads its log; a clashing run id is `ApiError(409)`, a write without the
token `ApiError(401)`; `wait` on a run that cannot finish raises `TimeoutError`; it sends
an event, clears, marks and cancels, and reads each effect back; the `AsyncClient`
triggers and waits too (issue 45, item 4).

Real PostgreSQL, Redis, `sluice api`, `sluice scheduler` and `sluice worker` as
subprocesses; the client speaks HTTP to the API's port as a user's script would.
"""

from __future__ import annotations

import asyncio
import socket
import textwrap
import time
import uuid

import httpx
import pytest

from sluice.client import ApiError, AsyncClient, Client, Run, TaskLog
from tests.procs import Sluice, wait_until

DAGS = """
import sluice
from sluice import DAG, task
from sluice.triggers import Event

with DAG("client_hello", schedule=None):
    @task
    def hello(context):
        print(f"hello from {context['run_id']}, conf {context['conf']}")

with DAG("client_gate", schedule=None):
    @task
    def gate(context):
        if context["trigger_event"] is None:
            sluice.defer(Event(context["run_id"]))
        print(f"approved with {context['trigger_event']}")

    @task
    def after(context):
        print("after the gate")

    gate >> after
"""

TOKEN = uuid.uuid4().hex


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def knows(c: Client, *dag_ids: str) -> bool:
    """The API answers and has every one of `dag_ids` (the scheduler has synced them)."""
    try:
        for dag_id in dag_ids:
            c.runs(dag_id, limit=1)
    except httpx.TransportError:  # not listening yet
        return False
    except ApiError as exc:
        if exc.status != 404:
            raise
        return False
    return True


def deferred(c: Client, dag_id: str, run_id: str, task_id: str) -> bool:
    (ti,) = c.task_instances(dag_id, run_id, task_id=task_id)
    return ti.state == "deferred"


@pytest.mark.long
@pytest.mark.timeout(120)
def test_the_client_drives_a_live_api(sluice: Sluice) -> None:
    # Given a scheduler, a worker and `sluice api` with a token, on the two DAGs
    (sluice.dags_folder / "client_dags.py").write_text(textwrap.dedent(DAGS))
    sluice.extra_env["SLUICE_API_TOKEN"] = TOKEN
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    sluice.scheduler()
    sluice.worker()
    api = sluice.start("api", "api", "--port", str(port))
    with Client(url, token=TOKEN, timeout=10) as c:
        wait_until(lambda: api.poll() is not None or knows(c, "client_hello", "client_gate"), 40)
        assert api.poll() is None, sluice.logs()

        # When a run is triggered and waited for: it succeeds, as every read says
        run = c.trigger("client_hello", conf={"who": "client"}, run_id="hello-1")
        assert isinstance(run, Run)
        assert (run.run_id, run.state, run.conf) == ("hello-1", "queued", {"who": "client"})
        final = c.wait(run, timeout=30, poll_interval=0.2)
        assert final.state == "success", sluice.logs()
        assert final.end_date is not None and final.end_date.tzinfo is not None
        assert c.run("client_hello", "hello-1") == final
        assert [r.run_id for r in c.runs("client_hello", state="success")] == ["hello-1"]
        assert c.runs("client_hello", state="failed") == []
        (ti,) = c.task_instances("client_hello", "hello-1")
        assert (ti.task_id, ti.state, ti.try_number) == ("hello", "success", 1)
        # Then its task's log has the line it printed
        log = c.logs("client_hello", "hello-1", "hello")
        assert isinstance(log, TaskLog) and log.try_number == 1
        assert "hello from hello-1, conf {'who': 'client'}" in log.content, log

        # A clashing run id: 409 with the server's one line, and no second run
        with pytest.raises(ApiError) as clash:
            c.trigger("client_hello", run_id="hello-1")
        assert clash.value.status == 409, clash.value
        assert "hello-1" in clash.value.message and "\n" not in clash.value.message
        assert len(c.runs("client_hello")) == 1

        # Clear: the task runs again (try 2); the first try's log is still there
        cleared = c.clear("client_hello", "hello-1", "hello")
        assert (cleared.cleared, cleared.run_state) == (1, "queued")
        assert c.wait(run, timeout=30, poll_interval=0.2).state == "success", sluice.logs()
        (ti,) = c.task_instances("client_hello", "hello-1")
        assert (ti.state, ti.try_number) == ("success", 2)
        assert "hello from hello-1" in c.logs("client_hello", "hello-1", "hello", 1).content
        assert c.logs("client_hello", "hello-1", "hello").try_number == 2

        # Mark the run failed: its finished task instance keeps its state; again is a 409
        marked = c.mark("client_hello", "hello-1", "failed")
        assert (marked.marked, marked.run_state) == ((), "failed")
        assert c.run("client_hello", "hello-1").state == "failed"
        assert [t.state for t in c.task_instances("client_hello", "hello-1")] == ["success"]
        with pytest.raises(ApiError) as nothing:
            c.mark("client_hello", "hello-1", "failed")
        assert nothing.value.status == 409

        # Given a run whose first task waits on an event: `wait` gives up at its timeout
        gated = c.trigger("client_gate", run_id="gate-1")
        wait_until(lambda: deferred(c, "client_gate", "gate-1", "gate"), timeout=30)
        started = time.monotonic()
        with pytest.raises(TimeoutError, match="'gate-1'"):
            c.wait(gated, timeout=1, poll_interval=0.2)
        assert 1 <= time.monotonic() - started < 5
        # When the event is sent: the task resumes with its payload, and the run succeeds
        assert c.send_event("gate-1", {"approved": True}).resumed == 1
        assert c.wait(gated, timeout=30, poll_interval=0.2).state == "success", sluice.logs()
        said = c.logs("client_gate", "gate-1", "gate").content
        assert "approved with {'approved': True}" in said, said

        # Mark a waiting task success: its downstream runs, and so the run succeeds
        second = c.trigger("client_gate", run_id="gate-2")
        wait_until(lambda: deferred(c, "client_gate", "gate-2", "gate"), timeout=30)
        marked = c.mark("client_gate", "gate-2", "success", task_id="gate")
        assert marked.marked == ("gate",)
        assert c.wait(second, timeout=30, poll_interval=0.2).state == "success", sluice.logs()
        tis = c.task_instances("client_gate", "gate-2")
        assert [(t.task_id, t.state) for t in tis] == [("gate", "success"), ("after", "success")]

        # Cancel a waiting run: it fails at once, its waiting task fails and the next is
        # skipped; cancelling it again is a 409. (Cancelled once it waits: a cancel while
        # the scheduler starts the run can be refused as "already ended (running)", as the
        # server compares the run's state it read before its lock; reported, not ours.)
        c.trigger("client_gate", run_id="gate-3")
        wait_until(lambda: deferred(c, "client_gate", "gate-3", "gate"), timeout=30)
        assert c.cancel("client_gate", "gate-3").state == "failed"
        assert c.run("client_gate", "gate-3").state == "failed"
        tis = c.task_instances("client_gate", "gate-3")
        assert [(t.task_id, t.state) for t in tis] == [("gate", "failed"), ("after", "skipped")]
        with pytest.raises(ApiError) as again:
            c.cancel("client_gate", "gate-3")
        assert again.value.status == 409

    # A write without the token is a 401 with the server's reason; reads are open
    with Client(url) as anonymous:
        with pytest.raises(ApiError) as refused:
            anonymous.trigger("client_hello")
        assert refused.value.status == 401
        assert "Authorization: Bearer" in refused.value.message
        assert anonymous.run("client_gate", "gate-1").state == "success"
        with pytest.raises(ApiError) as unknown:
            anonymous.run("client_gate", "no-such-run")
        assert unknown.value.status == 404 and "no-such-run" in unknown.value.message

    # The async client triggers and waits too
    async def trigger_and_wait() -> tuple[Run, TaskLog]:
        async with AsyncClient(url, token=TOKEN) as ac:
            run = await ac.trigger("client_hello", conf={"who": "async"})
            final = await ac.wait(run, timeout=30, poll_interval=0.2)
            return final, await ac.logs("client_hello", final.run_id, "hello")

    final, log = asyncio.run(trigger_and_wait())
    assert final.state == "success" and final.run_id.startswith("manual__"), sluice.logs()
    assert "conf {'who': 'async'}" in log.content, log
    sluice.stop(api)
    assert api.returncode == 0, sluice.logs()
