"""The error responses each route documents in the OpenAPI spec."""

from __future__ import annotations

from typing import Any

from sluice.scheduler.api.schemas import ErrorOut

_TEXT = {
    400: "a Content-Length header that is not a number of bytes (the request guard)",
    401: "no login, or a missing or wrong bearer token",
    403: "the caller's role is too low, or a write with the login cookie lacks its CSRF token",
    404: "unknown DAG, run, task or try",
    409: "a run with this run id or logical date exists",
    413: "a body over SLUICE_API_MAX_BODY_BYTES (the request guard)",
    422: "malformed body, date, conf or parameter",
    503: "the database is unavailable",
}


def errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """`responses=` for a route: 400, 401, 403, 413, 422 and 503 always (the request guard
    in front of every route answers 400 and 413), plus `codes`."""
    wanted = sorted({400, 401, 403, 413, 422, 503, *codes})
    return {code: {"model": ErrorOut, "description": _TEXT[code]} for code in wanted}
