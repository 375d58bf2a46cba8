"""`SecurityHeaders`: the headers every response of the app carries, set in one place.

- `X-Content-Type-Options: nosniff`: a browser takes a response for what its
  Content-Type says; a JSON answer or a task's log is never run as a script or a page.
- `Referrer-Policy: no-referrer`: the UI's addresses (a DAG's, a run's) are sent nowhere.
- `Content-Security-Policy` with `frame-ancestors 'none'`: no page may frame the UI
  (clickjacking). A response without a policy of its own (JSON, static files, errors)
  gets `NO_CONTENT_POLICY`; the UI's pages keep theirs (`ui.PAGE_HEADERS`), to which
  `frame-ancestors 'none'` is added if it lacks it.

Invariant: it wraps the whole application, outside Starlette's ServerErrorMiddleware
(`app.SluiceApi.build_middleware_stack`), so that every response passes through it: the
500 of an unexpected error, the request guard's 401, 403 and 413, every route's answer
and every handler's 4xx, the static files.
"""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

NO_FRAMING = "frame-ancestors 'none'"
NO_CONTENT_POLICY = f"default-src 'none'; {NO_FRAMING}"
"""The policy of a response that is not a page: it may load nothing, and not be framed."""

ALWAYS = {"X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}


def secure(headers: MutableHeaders) -> None:
    """Set the headers of the module's docstring on a response's `headers`."""
    for name, value in ALWAYS.items():
        headers[name] = value
    policy = headers.get("Content-Security-Policy")
    if policy is None:
        headers["Content-Security-Policy"] = NO_CONTENT_POLICY
    elif "frame-ancestors" not in policy:
        headers["Content-Security-Policy"] = f"{policy.rstrip('; ')}; {NO_FRAMING}"


class SecurityHeaders:
    """A pure ASGI middleware that sets the headers on every HTTP response it passes."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                secure(MutableHeaders(scope=message))
            await send(message)

        await self.app(scope, receive, send_secured)
