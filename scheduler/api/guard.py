"""`RequestGuard`: what is refused before the app reads a request's body.

FastAPI reads and parses a body before it resolves a route's dependencies, so the
write check of `deps` alone would let anyone without a token make the server read
and parse any body. This pure ASGI middleware sits in front of the app:

- A write (any method but GET, HEAD, OPTIONS, TRACE) under `/api/` from no one or from a
  viewer is refused with the routes' own 401 or 403 (`auth.resolve`) before a byte of
  its body is read; who it is from (a user's token or a login's session, looked up in
  the thread pool) is left in the request's state for the routes (`deps.IDENTITY`),
  which check the rest. A write made with the login cookie and without its CSRF token
  (`X-CSRF-Token`) is refused with 403 here, before its body is read. Logging in
  (`POST /api/v1/session`) needs no identity; logging out needs a viewer's.
- A body over `ApiConfig.max_body_bytes` (SLUICE_API_MAX_BODY_BYTES) is refused with
  413: at once when its Content-Length says so, else (chunked) as soon as the bytes
  received pass the limit; what was read is dropped and the app never sees it.
- A body within the limit is read here and handed to the app whole.

A refusal sent before the body was read closes the connection (`Connection: close`),
so the rest of the body is never taken for the next request.
"""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.requests import cookie_parser
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sluice.scheduler.api.auth import (
    CSRF_HEADER,
    SESSION_COOKIE,
    SESSION_PATH,
    SessionLookup,
    TokenLookup,
    bearer_token,
    resolve,
)
from sluice.scheduler.api.config import ApiConfig
from sluice.scheduler.api.errors import ApiError
from sluice.scheduler.core.roles import Role

IDENTITY = "sluice_identity"
"""Where who a write is from is left in the request's state (`deps.caller_identity`)."""

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
API_PREFIX = "/api/"


class RequestGuard:
    def __init__(
        self,
        app: ASGIApp,
        config: ApiConfig,
        lookup: TokenLookup,
        sessions: SessionLookup | None = None,
    ) -> None:
        self.app = app
        self.config = config
        self.lookup = lookup
        self.sessions: SessionLookup = sessions or (lambda session_id: None)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        announced = _announces_body(headers)
        method, path = scope["method"], scope["path"]
        logging_in = method == "POST" and path == SESSION_PATH
        if method not in SAFE_METHODS and path.startswith(API_PREFIX) and not logging_in:
            needed = Role.VIEWER if path == SESSION_PATH else Role.OPERATOR
            identity, refused = await resolve(
                self.config,
                self.lookup,
                self.sessions,
                token=bearer_token(headers.get("authorization")),
                session_id=session_cookie(headers),
                csrf=headers.get(CSRF_HEADER),
                write=True,
                needed=needed,
            )
            if refused is not None:
                await _refuse(refused, announced, scope, receive, send)
                return
            scope.setdefault("state", {})[IDENTITY] = identity
        limit = self.config.max_body_bytes
        length = _content_length(headers)
        if length is not None and length < 0:
            error = ApiError(400, "the Content-Length header is not a number of bytes")
            await _refuse(error, True, scope, receive, send)
            return
        if length is not None and length > limit:
            await _refuse(_too_large(limit), True, scope, receive, send)
            return
        if not announced:
            await self.app(scope, receive, send)
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the client left before it sent the whole body
            body += message.get("body", b"")
            if len(body) > limit:
                await _refuse(_too_large(limit), True, scope, receive, send)
                return
            if not message.get("more_body", False):
                break
        await self.app(scope, _replay(bytes(body), receive), send)


def session_cookie(headers: Headers) -> str | None:
    """The login cookie's value, if the request has one."""
    raw = headers.get("cookie")
    return cookie_parser(raw).get(SESSION_COOKIE) or None if raw else None


def _content_length(headers: Headers) -> int | None:
    """The Content-Length, None without one, -1 if it is not a number of bytes."""
    raw = headers.get("content-length")
    if raw is None:
        return None
    try:
        length = int(raw.strip())
    except ValueError:
        return -1
    return length if length >= 0 and raw.strip().isascii() else -1


def _announces_body(headers: Headers) -> bool:
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return True
    return _content_length(headers) != 0 and headers.get("content-length") is not None


def _too_large(limit: int) -> ApiError:
    return ApiError(
        413, f"the request body is over {limit} bytes, the API's SLUICE_API_MAX_BODY_BYTES"
    )


async def _refuse(
    error: ApiError, unread_body: bool, scope: Scope, receive: Receive, send: Send
) -> None:
    headers = dict(error.headers)
    if unread_body:
        headers["Connection"] = "close"
    response = JSONResponse({"detail": error.detail}, status_code=error.status, headers=headers)
    await response(scope, receive, send)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A `receive` that gives the whole body in one message, then the client's own."""
    given = False

    async def replay() -> Message:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
