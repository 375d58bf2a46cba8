"""`AsyncClient`: the same methods as `Client`, to await.

    async with AsyncClient("http://127.0.0.1:8080", token="...") as c:
        run = await c.trigger("etl", conf={"day": "2026-01-31"})
        run = await c.wait(run, timeout=600)

It sends the same `calls` as `Client` through httpx's async client and reads them with
the same bound; `wait` sleeps with `asyncio.sleep`. Each method's meaning is `Client`'s.
"""

from __future__ import annotations

import asyncio
import datetime as dt
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


class AsyncClient:
    """`Client`, to await: close it with `await aclose()`, or use `async with`."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        headers: Mapping[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._options = Options(base_url, token, timeout, max_response_bytes, headers)
        self._http = httpx.AsyncClient(transport=transport, **self._options.httpx_arguments())

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _send(self, call: calls.Call[T]) -> T:
        limit = self._options.max_response_bytes
        async with self._http.stream(
            call.method, call.path, params=call.params, json=call.body
        ) as response:
            status = response.status_code
            check_announced(status, response.headers, limit)
            body = bytearray()
            async for chunk in response.aiter_bytes():
                take(body, chunk, status, limit)
        return result(call, status, response.reason_phrase, bytes(body))

    # -- runs ------------------------------------------------------------------------------

    async def trigger(
        self,
        dag_id: str,
        conf: Mapping[str, Any] | None = None,
        run_id: str | None = None,
        *,
        logical_date: dt.datetime | str | None = None,
        version: str | None = None,
    ) -> Run:
        return await self._send(calls.trigger(dag_id, conf, run_id, logical_date, version))

    async def run(self, dag_id: str, run_id: str) -> Run:
        return await self._send(calls.get_run(dag_id, run_id))

    async def runs(
        self, dag_id: str, state: str | None = None, limit: int = 25, offset: int = 0
    ) -> list[Run]:
        return await self._send(calls.list_runs(dag_id, state, limit, offset))

    async def wait(
        self, run: Run, timeout: float | None = 600.0, *, poll_interval: float = 2.0
    ) -> Run:
        pacing = Pacing(timeout, poll_interval)
        while True:
            run = await self.run(run.dag_id, run.run_id)
            if run.finished:
                return run
            pause = pacing.next_pause()
            if pause is None:
                raise timed_out(run, timeout)
            await asyncio.sleep(pause)

    async def cancel(self, dag_id: str, run_id: str) -> Run:
        return await self._send(calls.cancel(dag_id, run_id))

    async def mark(
        self,
        dag_id: str,
        run_id: str,
        state: str,
        *,
        task_id: str | None = None,
        upstream: bool = False,
        downstream: bool = False,
    ) -> MarkResult:
        return await self._send(calls.mark(dag_id, run_id, state, task_id, upstream, downstream))

    # -- task instances --------------------------------------------------------------------

    async def task_instances(
        self,
        dag_id: str,
        run_id: str,
        *,
        task_id: str | None = None,
        state: str | None = None,
        map_index: int | None = None,
    ) -> list[TaskInstance]:
        found: list[TaskInstance] = []
        while True:
            page = await self._send(
                calls.list_task_instances(dag_id, run_id, task_id, state, map_index, len(found))
            )
            found.extend(page.items)
            if not page.items or len(found) >= page.total:
                return found

    async def logs(
        self,
        dag_id: str,
        run_id: str,
        task_id: str,
        try_number: int | None = None,
        *,
        map_index: int | None = None,
    ) -> TaskLog:
        return await self._send(calls.task_log(dag_id, run_id, task_id, try_number, map_index))

    async def clear(
        self,
        dag_id: str,
        run_id: str,
        task_id: str,
        *,
        downstream: bool = False,
        map_index: int | None = None,
    ) -> ClearResult:
        return await self._send(calls.clear(dag_id, run_id, task_id, downstream, map_index))

    # -- events ----------------------------------------------------------------------------

    async def send_event(self, key: str, payload: Mapping[str, Any] | None = None) -> EventResult:
        return await self._send(calls.send_event(key, payload))
