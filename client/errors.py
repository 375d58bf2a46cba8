"""What the client raises when the API answers something other than a success.

- `ApiError`: every non-2xx answer, with its `status` and the server's one-line message
  (the body's `detail`; a list of validation errors joined on one line; the first line
  of a body that is not the API's JSON, such as a proxy's error page).
- `ResponseTooLarge` (an `ApiError`): an answer whose body is over the client's
  `max_response_bytes`; it is not read past that bound.
- `InvalidResponse` (an `ApiError`): a 2xx whose body is not what the API answers
  (not JSON, a field missing or of the wrong type).

Network failures (refused connections, timeouts) stay httpx's (`httpx.TransportError`).
"""

from __future__ import annotations

import json
from typing import Any

MAX_MESSAGE = 300
"""Longest message kept from a body (the server's own `detail` is at most 300 too)."""


class ApiError(Exception):
    """The API answered `status` (not 2xx), saying `message` in one line."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        self.message = one_line(message)
        super().__init__(f"{status}: {self.message}")

    def __reduce__(self) -> tuple[type[ApiError], tuple[int, str]]:
        return (type(self), (self.status, self.message))  # pickled as it was made


class ResponseTooLarge(ApiError):
    """An answer's body is over the client's bound; the rest of it was not read."""


class InvalidResponse(ApiError):
    """A successful answer whose body is not the API's shape."""


def one_line(text: str) -> str:
    """`text` with its whitespace (newlines too) collapsed, at most MAX_MESSAGE characters."""
    line = " ".join(text.split())
    return line if len(line) <= MAX_MESSAGE else line[: MAX_MESSAGE - 3] + "..."


def error_from(status: int, body: bytes, reason: str = "") -> ApiError:
    """The `ApiError` of a non-2xx answer: its status and the server's message.

    The message is the JSON body's `detail` when it is a string; a list of errors
    (FastAPI's own 422 shape) joined as `where: what; where: what`; the first non-empty
    line of any other body; the reason phrase (`Bad Gateway`) when the body is empty."""
    return ApiError(status, message_of(body) or reason or f"HTTP {status}")


def message_of(body: bytes) -> str:
    """The one-line message a body carries (empty when it carries none)."""
    try:
        data: Any = json.loads(body)
    except ValueError:  # not JSON, or not UTF-8: the text's first line
        text = body.decode("utf-8", errors="replace")
        return one_line(next((line for line in text.splitlines() if line.strip()), ""))
    detail = data.get("detail") if isinstance(data, dict) else data
    if isinstance(detail, str):
        return one_line(detail)
    if isinstance(detail, list) and detail:
        return one_line("; ".join(_one_error(item) for item in detail))
    if detail is None or detail == [] or detail == {}:
        return ""
    return one_line(json.dumps(detail, separators=(",", ":"), default=str))


def _one_error(item: Any) -> str:
    """One error of a list: `body.conf: Input should be a valid dictionary`."""
    if not isinstance(item, dict):
        return str(item)
    where = ".".join(str(part) for part in item.get("loc") or ())
    what = str(item.get("msg", "invalid value"))
    return f"{where}: {what}" if where else what
