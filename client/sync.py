"""`Client`: the REST API of a `sluice api` server, from blocking code.

    with Client("http://127.0.0.1:8080", token="...") as c:
        run = c.trigger("etl", conf={"day": "2026-01-31"})
        run = c.wait(run, timeout=600)

Every method is one `calls` function sent through `_send`; `AsyncClient` (`async_.py`)
sends the same calls.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Mapping
from types import TracebackType
from typing import Any, TypeVar

import httpx

from sluice.client import calls
from sluice.client.config import DEFAULT_TIMEOUT, Options
from sluice.client.models import ClearResult, EventResult, MarkResult, Run, TaskInstance, TaskLog
from sluice.client.polling import Pacing, timed_out
from sluice.client.reading import MAX_RESPONSE_BYTES, check_announced, result, take

T = TypeVar("T")


class Client:
    """A client of one Sluice API server at `base_url`; writes need its `token`
    (`SLUICE_API_TOKEN`), sent as `Authorization: Bearer <token>`.

    Each request may take `timeout` seconds to connect and between two reads (an
    `httpx.Timeout` for finer control); an answer's body over `max_response_bytes` raises
    `ResponseTooLarge`. `transport` replaces httpx's (tests use `httpx.MockTransport`).
    Close it with `close()`, or use it in a `with` block."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        headers: Mapping[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._options = Options(base_url, token, timeout, max_response_bytes, headers)
        self._http = httpx.Client(transport=transport, **self._options.httpx_arguments())

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _send(self, call: calls.Call[T]) -> T:
        limit = self._options.max_response_bytes
        with self._http.stream(
            call.method, call.path, params=call.params, json=call.body
        ) as response:
            status = response.status_code
            check_announced(status, response.headers, limit)
            body = bytearray()
            for chunk in response.iter_bytes():
                take(body, chunk, status, limit)
        return result(call, status, response.reason_phrase, bytes(body))

    # -- runs ------------------------------------------------------------------------------

    def trigger(
        self,
        dag_id: str,
        conf: Mapping[str, Any] | None = None,
        run_id: str | None = None,
        *,
        logical_date: dt.datetime | str | None = None,
        version: str | None = None,
    ) -> Run:
        """Create a manual run (queued); `ApiError` 409 if `run_id` exists, 422 if its
        params refuse `conf`, 404 for an unknown DAG."""
        return self._send(calls.trigger(dag_id, conf, run_id, logical_date, version))

    def run(self, dag_id: str, run_id: str) -> Run:
        """The run, with its conf and note."""
        return self._send(calls.get_run(dag_id, run_id))

    def runs(
        self, dag_id: str, state: str | None = None, limit: int = 25, offset: int = 0
    ) -> list[Run]:
        """The DAG's runs, newest logical date first, only those in `state` if given;
        at most `limit` (1 to 500) after skipping `offset` (without conf nor note)."""
        return self._send(calls.list_runs(dag_id, state, limit, offset))

    def wait(self, run: Run, timeout: float | None = 600.0, *, poll_interval: float = 2.0) -> Run:
        """Read the run until it is `success` or `failed` and return it; raise
        `TimeoutError` if it is not within `timeout` seconds (None: no limit). Reads are
        0.1 s apart at first, then further apart, at most `poll_interval` seconds."""
        pacing = Pacing(timeout, poll_interval)
        while True:
            run = self.run(run.dag_id, run.run_id)
            if run.finished:
                return run
            pause = pacing.next_pause()
            if pause is None:
                raise timed_out(run, timeout)
            time.sleep(pause)

    def cancel(self, dag_id: str, run_id: str) -> Run:
        """Stop a queued or running run: its tasks not started are skipped, its running
        tries fail and are stopped, the run fails. `ApiError` 409 if it has finished."""
        return self._send(calls.cancel(dag_id, run_id))

    def mark(
        self,
        dag_id: str,
        run_id: str,
        state: str,
        *,
        task_id: str | None = None,
        upstream: bool = False,
        downstream: bool = False,
    ) -> MarkResult:
        """Mark the run (`success` or `failed`, with its task instances) or, with
        `task_id`, the task instance (`success`, `failed` or `skipped`; with `upstream`
        and `downstream` those too). The tries it takes are stopped. `ApiError` 409 if
        all are in that state already."""
        return self._send(calls.mark(dag_id, run_id, state, task_id, upstream, downstream))

    # -- task instances --------------------------------------------------------------------

    def task_instances(
        self,
        dag_id: str,
        run_id: str,
        *,
        task_id: str | None = None,
        state: str | None = None,
        map_index: int | None = None,
    ) -> list[TaskInstance]:
        """Every task instance of the run in the DAG's order (a mapped task's by map
        index), only those of `task_id`, in `state` or at `map_index` if given; read page
        by page."""
        found: list[TaskInstance] = []
        while True:
            page = self._send(
                calls.list_task_instances(dag_id, run_id, task_id, state, map_index, len(found))
            )
            found.extend(page.items)
            if not page.items or len(found) >= page.total:
                return found

    def logs(
        self,
        dag_id: str,
        run_id: str,
        task_id: str,
        try_number: int | None = None,
        *,
        map_index: int | None = None,
    ) -> TaskLog:
        """What one try (default: the current one) printed and logged; a mapped task's
        index is `map_index`. `ApiError` 404 for a try that has not run."""
        return self._send(calls.task_log(dag_id, run_id, task_id, try_number, map_index))

    def clear(
        self,
        dag_id: str,
        run_id: str,
        task_id: str,
        *,
        downstream: bool = False,
        map_index: int | None = None,
    ) -> ClearResult:
        """Reset the task instance (a task group's id: its tasks; with `downstream`, what
        depends on it too; with `map_index`, that index only) so that it runs again."""
        return self._send(calls.clear(dag_id, run_id, task_id, downstream, map_index))

    # -- events ----------------------------------------------------------------------------

    def send_event(self, key: str, payload: Mapping[str, Any] | None = None) -> EventResult:
        """Send an event on `key`: every task deferred on `sluice.triggers.Event(key)`
        resumes with `payload` (`{}` when None) as its `context["trigger_event"]`."""
        return self._send(calls.send_event(key, payload))
