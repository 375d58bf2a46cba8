"""How errors become responses: `{"detail": "<one line>"}`, never a stack trace.

Invariants:
- Bad input is a 4xx with a one-line `detail`: 404 unknown DAG/run/task/try,
  409 a run that exists, 422 a malformed body, date, conf or parameter.
- A database that cannot be reached is a 503; anything unexpected is a 500
  whose body says nothing but "internal error" (the log has the details).
- No response carries a URL, a host name of the database or broker, or a password.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DataError, OperationalError
from starlette.exceptions import HTTPException

log = logging.getLogger(__name__)

MAX_DETAIL = 300


class ApiError(Exception):
    """An error answered as `status` with a one-line `detail`."""

    def __init__(self, status: int, detail: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = one_line(detail)
        self.headers = dict(headers or {})


def not_found(detail: str) -> ApiError:
    return ApiError(404, detail)


def unprocessable(detail: str) -> ApiError:
    return ApiError(422, detail)


def one_line(text: str) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= MAX_DETAIL else line[: MAX_DETAIL - 3] + "..."


def validation_detail(errors: Sequence[Any]) -> str:
    """The first validation error as `where: what` (`body.conf: Input should be ...`)."""
    if not errors:
        return "invalid request"
    first = errors[0]
    where = ".".join(str(part) for part in first.get("loc", ()) if part != "body")
    kind = first.get("type", "")
    if kind == "json_invalid":
        return "the body is not valid JSON"
    if kind == "missing" and not where:
        return "a JSON body is required"
    message = str(first.get("msg", "invalid value"))
    if kind == "value_error" and message.startswith("Value error, "):
        message = message[len("Value error, ") :]
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return one_line(f"{where or 'body'}: {message}{more}")


def _body(status: int, detail: str, headers: Mapping[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"detail": detail}, status_code=status, headers=dict(headers or {}))


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return _body(exc.status, exc.detail, exc.headers)

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException) -> JSONResponse:
        if exc.status_code == 400:  # FastAPI could not read the body (not UTF-8, not JSON)
            if isinstance(exc.__cause__, RecursionError):  # deeper than json.loads goes
                depth = request.app.state.sluice.settings.max_conf_depth
                return _body(
                    422,
                    "the body is nested too deeply to read; a conf may be at most "
                    f"{depth} levels deep (SLUICE_MAX_CONF_DEPTH)",
                )
            return _body(422, "the body is not valid JSON")
        return _body(exc.status_code, one_line(str(exc.detail)), exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return _body(422, validation_detail(exc.errors()))

    @app.exception_handler(OperationalError)
    async def _database_down(request: Request, exc: OperationalError) -> JSONResponse:
        log.warning("database error on %s %s: %s", request.method, request.url.path, exc)
        return _body(503, "the database is unavailable; try again")

    @app.exception_handler(DataError)
    async def _value_refused(request: Request, exc: DataError) -> JSONResponse:
        log.warning("database refused a value on %s %s: %s", request.method, request.url.path, exc)
        return _body(422, "the database refused a value of this request")

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        # Starlette raises the exception again after this response: the server logs it.
        return _body(500, "internal error")
