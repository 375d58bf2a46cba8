"""A Python client of Sluice's REST API (`sluice api`), sync and async, on httpx.

    from sluice.client import Client, ApiError

    with Client("http://127.0.0.1:8080", token=token) as c:
        run = c.trigger("etl", conf={"day": "2026-01-31"})
        run = c.wait(run, timeout=600)            # the final run; TimeoutError
        print(c.logs("etl", run.run_id, "load").content)

`AsyncClient` has the same methods, to await. Every non-2xx answer raises `ApiError`
(`.status`, `.message`: the server's one line). Results are frozen dataclasses
(`models`). The client imports httpx and the standard library only, nothing of the
server side (no SQLAlchemy, Celery nor FastAPI): `docs/client.md`.
"""

from __future__ import annotations

from sluice.client.async_ import AsyncClient
from sluice.client.errors import ApiError, InvalidResponse, ResponseTooLarge
from sluice.client.models import (
    RUN_TERMINAL,
    ClearResult,
    EventResult,
    MarkResult,
    Note,
    Run,
    TaskInstance,
    TaskLog,
    VersionRef,
)
from sluice.client.sync import Client

__all__ = [
    "RUN_TERMINAL",
    "ApiError",
    "AsyncClient",
    "ClearResult",
    "Client",
    "EventResult",
    "InvalidResponse",
    "MarkResult",
    "Note",
    "ResponseTooLarge",
    "Run",
    "TaskInstance",
    "TaskLog",
    "VersionRef",
]
