"""The error responses each route documents in the OpenAPI spec."""

from __future__ import annotations

from typing import Any

from sluice.scheduler.api.schemas import ErrorOut

_TEXT = {
    401: "missing or wrong bearer token",
    403: "writes (or reads) are disabled: SLUICE_API_TOKEN is not set",
    404: "unknown DAG, run, task or try",
    409: "a run with this run id or logical date exists",
    422: "malformed body, date, conf or parameter",
    503: "the database is unavailable",
}


def errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """`responses=` for a route: 401, 403, 422 and 503 always, plus `codes`."""
    wanted = sorted({401, 403, 422, 503, *codes})
    return {code: {"model": ErrorOut, "description": _TEXT[code]} for code in wanted}
