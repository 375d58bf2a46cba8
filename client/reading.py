"""Reading an answer, bounded: its body at most `limit` bytes, then its result or its
`ApiError`. Both clients read through these functions; only their I/O differs.

Invariants:
- A body is never held past `limit` bytes: an announced Content-Length over it is
  refused before a byte is read, a body without one as soon as it passes the limit.
  The limit counts decoded bytes (after gzip), so a small compressed body cannot
  grow past it.
- Every non-2xx answer raises `ApiError` with the server's one-line message.
- A 2xx whose body is not the method's JSON raises `InvalidResponse`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TypeVar

from sluice.client.calls import Call
from sluice.client.errors import InvalidResponse, ResponseTooLarge, error_from

T = TypeVar("T")

MAX_RESPONSE_BYTES = 16 * 1024 * 1024
"""The default bound of an answer's body: 16 MiB (a task log's page is far below)."""


def check_announced(status: int, headers: Mapping[str, str], limit: int) -> None:
    """Refuse an answer whose Content-Length says it is over `limit` bytes."""
    announced = headers.get("content-length", "").strip()
    if announced.isdigit() and int(announced) > limit:
        raise _too_large(status, limit)


def take(body: bytearray, chunk: bytes, status: int, limit: int) -> None:
    """Add `chunk` to `body`, or refuse the answer once it passes `limit` bytes."""
    if len(body) + len(chunk) > limit:
        raise _too_large(status, limit)
    body += chunk


def _too_large(status: int, limit: int) -> ResponseTooLarge:
    return ResponseTooLarge(
        status, f"the answer's body is over {limit} bytes (the client's max_response_bytes)"
    )


def result(call: Call[T], status: int, reason: str, body: bytes) -> T:
    """What `call` returns for an answer (`status`, `body`); `ApiError` unless a 2xx."""
    if not 200 <= status < 300:
        raise error_from(status, body, reason)
    try:
        data = json.loads(body)
    except ValueError:
        raise InvalidResponse(status, "the answer is not JSON") from None
    if not isinstance(data, dict):
        raise InvalidResponse(status, "the answer is not a JSON object")
    try:
        return call.decode(data)
    except KeyError as exc:
        raise InvalidResponse(status, f"the answer has no field {exc}") from None
    except (TypeError, ValueError) as exc:
        raise InvalidResponse(status, f"the answer has a field of the wrong shape: {exc}") from None
