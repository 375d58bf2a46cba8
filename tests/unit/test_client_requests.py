"""What the client asks and what it makes of the answers, without a server
(`httpx.MockTransport`): each method's route, query and body; the bearer token; ids
percent-encoded; typed results with aware datetimes, extra fields ignored; the task
instances of a long run read page by page; `wait`'s reads until a terminal state or
its deadline."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from sluice.client import (
    AsyncClient,
    ClearResult,
    Client,
    EventResult,
    MarkResult,
    Run,
    TaskInstance,
)

URL = "http://sluice.test"
V1 = "/api/v1"


def run_json(state: str = "queued", **more: Any) -> dict[str, Any]:
    return {
        "dag_id": "etl",
        "run_id": "manual__2026-01-31T00:00:00+00:00",
        "logical_date": "2026-01-31T00:00:00Z",
        "run_type": "manual",
        "state": state,
        "queued_at": "2026-01-31T00:00:01.5+00:00",
        "start_date": None,
        "end_date": None,
        "trace_id": None,
        "trace_url": None,
        "conf": {"day": 1},
        "note": {"note": "hi", "who": "ann", "at": "2026-01-31T00:00:02Z"},
        "version": {"sha": "a" * 40, "short": "a" * 12, "subject": "fix"},
        "a_field_from_a_newer_server": [1, 2],
        **more,
    }


def ti_json(task_id: str) -> dict[str, Any]:
    return {
        "task_id": task_id,
        "map_index": None,
        "state": "success",
        "try_number": 1,
        "max_tries": 0,
        "queue": "default",
        "pool": "default_pool",
        "hostname": "h",
        "attempt_id": "x",
        "scheduled_at": "2026-01-31T00:00:00Z",
        "queued_at": None,
        "start_date": None,
        "end_date": None,
        "next_retry_at": None,
        "error": None,
        "new": True,
    }


class Recorder:
    """A fake API: answers each request with `answers(request)`, and keeps the requests."""

    def __init__(self, answers: Callable[[httpx.Request], Any]) -> None:
        self.answers = answers
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        status, body = self.answers(request)
        return httpx.Response(status, json=body)

    def client(self, token: str | None = "s3cret") -> Client:
        return Client(URL, token=token, transport=httpx.MockTransport(self))

    @property
    def last(self) -> httpx.Request:
        return self.requests[-1]


def sent(request: httpx.Request) -> Any:
    return json.loads(request.content) if request.content else None


def test_trigger_posts_the_run_with_the_token_and_reads_a_typed_run() -> None:
    api = Recorder(lambda request: (201, run_json()))
    with api.client() as c:
        run = c.trigger("etl", conf={"day": 1}, run_id="r/1 +x")
    request = api.last
    assert request.method == "POST"
    assert request.url.raw_path == f"{V1}/dags/etl/runs".encode()
    assert request.headers["Authorization"] == "Bearer s3cret"
    assert sent(request) == {"conf": {"day": 1}, "run_id": "r/1 +x"}
    assert isinstance(run, Run)
    assert run.run_id == "manual__2026-01-31T00:00:00+00:00" and run.state == "queued"
    assert run.logical_date == dt.datetime(2026, 1, 31, tzinfo=dt.UTC)
    assert run.queued_at == dt.datetime(2026, 1, 31, 0, 0, 1, 500000, tzinfo=dt.UTC)
    assert run.conf == {"day": 1} and run.note is not None and run.note.who == "ann"
    assert run.version is not None and run.version.short == "a" * 12
    assert not run.finished
    with pytest.raises(AttributeError):
        run.state = "success"  # type: ignore[misc]


def test_trigger_sends_only_what_it_is_given() -> None:
    api = Recorder(lambda request: (201, run_json()))
    with api.client() as c:
        c.trigger("etl")
        assert sent(api.last) == {}
        when = dt.datetime(2026, 1, 31, 6, tzinfo=dt.UTC)
        c.trigger("etl", logical_date=when, version="release-1")
        assert sent(api.last) == {
            "logical_date": "2026-01-31T06:00:00+00:00",
            "version": "release-1",
        }


def test_no_token_sends_no_authorization() -> None:
    api = Recorder(lambda request: (200, run_json()))
    with api.client(token=None) as c:
        c.run("etl", "r1")
    assert "Authorization" not in api.last.headers


def test_ids_are_percent_encoded_in_paths() -> None:
    api = Recorder(lambda request: (200, run_json()))
    with api.client() as c:
        c.run("my dag", "manual__2026-01-31T00:00:00+00:00")
    path = api.last.url.raw_path.decode()
    assert path == f"{V1}/dags/my%20dag/runs/manual__2026-01-31T00%3A00%3A00%2B00%3A00"


def test_a_base_url_with_a_path_keeps_it() -> None:
    api = Recorder(lambda request: (200, run_json()))
    with Client(f"{URL}/sluice/", transport=httpx.MockTransport(api)) as c:
        c.run("etl", "r1")
    assert api.last.url.raw_path == f"/sluice{V1}/dags/etl/runs/r1".encode()


def test_runs_lists_with_state_and_limit() -> None:
    body = {"runs": [run_json("failed", conf=None, note=None)], "total": 7, "limit": 3}
    api = Recorder(lambda request: (200, {**body, "offset": 2}))
    with api.client() as c:
        runs = c.runs("etl", state="failed", limit=3, offset=2)
        assert dict(api.last.url.params) == {"limit": "3", "offset": "2", "state": "failed"}
        assert [r.state for r in runs] == ["failed"] and runs[0].conf is None
        assert runs[0].finished
        c.runs("etl")
        assert dict(api.last.url.params) == {"limit": "25", "offset": "0"}


def test_task_instances_reads_every_page() -> None:
    tis = [ti_json(f"t{i}") for i in range(1203)]

    def page(request: httpx.Request) -> tuple[int, Any]:
        offset, limit = int(request.url.params["offset"]), int(request.url.params["limit"])
        items = tis[offset : offset + limit]
        return 200, {"task_instances": items, "total": len(tis), "limit": limit, "offset": offset}

    api = Recorder(page)
    with api.client() as c:
        found = c.task_instances("etl", "r1", state="success")
    assert [ti.task_id for ti in found] == [f"t{i}" for i in range(1203)]
    assert all(isinstance(ti, TaskInstance) and ti.map_index is None for ti in found)
    assert [r.url.params["offset"] for r in api.requests] == ["0", "500", "1000"]
    assert all(r.url.params["state"] == "success" for r in api.requests)
    assert api.last.url.path == f"{V1}/dags/etl/runs/r1/tasks"


def test_task_instances_stops_on_a_page_shorter_than_promised() -> None:
    """A run whose task instances shrink while it is read (a total that cannot be
    reached) ends the reading at the first empty page."""
    api = Recorder(
        lambda request: (
            200,
            {
                "task_instances": [] if request.url.params["offset"] != "0" else [ti_json("a")],
                "total": 5,
            },
        )
    )
    with api.client() as c:
        assert [ti.task_id for ti in c.task_instances("etl", "r1")] == ["a"]
    assert len(api.requests) == 2


def test_logs_asks_for_the_try() -> None:
    log = {
        "dag_id": "etl",
        "run_id": "r1",
        "task_id": "load",
        "try_number": 2,
        "attempt_id": None,
        "hostname": None,
        "started_at": None,
        "updated_at": None,
        "finished_at": "2026-01-31T00:00:00Z",
        "dropped_lines": 0,
        "content": "hello\n",
    }
    api = Recorder(lambda request: (200, log))
    with api.client() as c:
        got = c.logs("etl", "r1", "load", 2)
        assert dict(api.last.url.params) == {"try_number": "2"}
        c.logs("etl", "r1", "load", map_index=3)
        assert dict(api.last.url.params) == {"map_index": "3"}
    assert api.last.url.path == f"{V1}/dags/etl/runs/r1/tasks/load/logs"
    assert got.content == "hello\n" and got.finished_at is not None
    assert got.finished_at.tzinfo is not None


def test_writes_go_to_their_routes() -> None:
    def answers(request: httpx.Request) -> tuple[int, Any]:
        path = request.url.path
        if path.endswith("/clear"):
            return 200, {"cleared": 2, "run_state": "queued"}
        if path.endswith("/mark"):
            return 200, {"marked": ["load"], "stopped": 1, "run_state": "success"}
        if path.endswith("/cancel"):
            return 200, run_json("failed")
        return 200, {"resumed": 3}

    api = Recorder(answers)
    run = f"{V1}/dags/etl/runs/r1"
    with api.client() as c:
        assert c.clear("etl", "r1", "load", downstream=True) == ClearResult(2, "queued")
        assert (api.last.url.path, sent(api.last)) == (
            f"{run}/tasks/load/clear",
            {"downstream": True},
        )
        c.clear("etl", "r1", "load", map_index=0)
        assert sent(api.last) == {"downstream": False, "map_index": 0}

        assert c.mark("etl", "r1", "success") == MarkResult(("load",), 1, "success")
        assert (api.last.url.path, sent(api.last)) == (f"{run}/mark", {"state": "success"})
        c.mark("etl", "r1", "skipped", task_id="load", downstream=True)
        assert (api.last.url.path, sent(api.last)) == (
            f"{run}/tasks/load/mark",
            {"state": "skipped", "upstream": False, "downstream": True},
        )
        with pytest.raises(ValueError, match="give a task_id"):
            c.mark("etl", "r1", "failed", downstream=True)

        assert c.cancel("etl", "r1").state == "failed"
        assert (api.last.method, api.last.url.path) == ("POST", f"{run}/cancel")

        assert c.send_event("approve", {"ok": True}) == EventResult(3)
        assert (api.last.url.path, sent(api.last)) == (
            f"{V1}/events",
            {"key": "approve", "payload": {"ok": True}},
        )
        c.send_event("approve")
        assert sent(api.last) == {"key": "approve"}
    assert all(r.method == "POST" for r in api.requests)


def states(*names: str) -> Callable[[httpx.Request], tuple[int, Any]]:
    """Answers a run in each state of `names` in turn, then in the last one."""
    left = list(names)

    def answer(request: httpx.Request) -> tuple[int, Any]:
        state = left.pop(0) if len(left) > 1 else left[0]
        return 200, run_json(state)

    return answer


def test_wait_reads_until_the_run_has_finished() -> None:
    api = Recorder(states("queued", "running", "running", "success"))
    with api.client() as c:
        started = time.monotonic()
        final = c.wait(Run.from_json(run_json()), timeout=10, poll_interval=0.2)
    assert final.state == "success" and final.finished
    assert len(api.requests) == 4
    assert time.monotonic() - started < 2  # 0.1 + 0.15 + 0.2 s of pauses
    assert all(r.method == "GET" for r in api.requests)


def test_wait_raises_timeout_error_at_its_deadline() -> None:
    api = Recorder(states("running"))
    with api.client() as c:
        started = time.monotonic()
        with pytest.raises(TimeoutError, match="is still running after 0.5 s"):
            c.wait(Run.from_json(run_json()), timeout=0.5, poll_interval=0.1)
    took = time.monotonic() - started
    assert 0.5 <= took < 1.5
    assert 4 <= len(api.requests) <= 8  # about one read a 0.1 s, and one at the deadline


def test_wait_with_a_zero_timeout_reads_once() -> None:
    api = Recorder(states("queued"))
    with api.client() as c, pytest.raises(TimeoutError):
        c.wait(Run.from_json(run_json()), timeout=0)
    assert len(api.requests) == 1


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"base_url": "127.0.0.1:8080"}, "http:// or https://"),
        ({"token": ""}, "token"),
        ({"token": " padded"}, "token"),
        ({"timeout": 0}, "timeout"),
        ({"max_response_bytes": 0}, "max_response_bytes"),
    ],
)
def test_bad_options_are_refused_at_once(options: dict[str, Any], said: str) -> None:
    arguments = {"base_url": URL, **options}
    with pytest.raises(ValueError, match=said):
        Client(**arguments)
    with pytest.raises(ValueError, match=said):
        AsyncClient(**arguments)


def test_the_async_client_makes_the_same_requests() -> None:
    api = Recorder(states("queued", "running", "success"))

    async def main() -> tuple[Run, Run]:
        transport = httpx.MockTransport(api)
        async with AsyncClient(URL, token="s3cret", transport=transport) as c:
            run = await c.trigger("etl", conf={"day": 1})
            return run, await c.wait(run, timeout=10, poll_interval=0.1)

    run, final = asyncio.run(main())
    assert (run.state, final.state) == ("queued", "success")
    first = api.requests[0]
    assert first.method == "POST" and sent(first) == {"conf": {"day": 1}}
    assert first.headers["Authorization"] == "Bearer s3cret"
    assert [r.method for r in api.requests] == ["POST", "GET", "GET"]
