"""The bearer-token rules, as plain functions: the route dependencies (`deps`) and the
request guard in front of the app (`guard`) both decide with them, so they always agree.

Who a request is from: the shared `SLUICE_API_TOKEN` is an admin (its
holder is `API_USER`); any other bearer value is looked up as a user's token
(`core.queries.users.identity_of_token`: not revoked, not expired). What it may do
(`refusal`): reads are open unless `SLUICE_API_READ_AUTH=1`, then they need a viewer at
least; writes need an operator (trigger, clear, mark, cancel, events, notes) or an
admin (pools, users, tokens). No token or one that is not valid: 401; a role too low:
403. The shared token is compared in constant time.

A web UI login (`routes_session`) is a session cookie instead (`SESSION_COOKIE`, HttpOnly,
SameSite=Strict): without a bearer token, a request with it is that session's user
(`resolve`). The browser sends a cookie by itself, so a write made with it must also
carry the session's CSRF token in `X-CSRF-Token` (compared in constant time), else 403;
a bearer token, which a page of another site cannot make a browser send, needs none.
A cookie whose session has ended (logout, expiry, its user deleted): 401.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable

from anyio.to_thread import run_sync

from sluice.scheduler.api.config import ApiConfig
from sluice.scheduler.api.errors import ApiError
from sluice.scheduler.core.queries.ui_sessions import FoundSession
from sluice.scheduler.core.queries.users import Identity
from sluice.scheduler.core.roles import Role

CHALLENGE = {"WWW-Authenticate": "Bearer"}

API_USER = "api (bearer token)"
"""Who the audit log names for an operation made with the shared SLUICE_API_TOKEN."""

SESSION_COOKIE = "sluice_session"
"""The cookie of a web UI login: a random session id (the database keeps its SHA-256)."""
CSRF_HEADER = "X-CSRF-Token"
SESSION_PATH = "/api/v1/session"
"""Log in (POST: no identity needed), who is logged in (GET), log out (DELETE)."""

TokenLookup = Callable[[str], Identity | None]
"""A user's token to its identity (a database read: the guard and the dependencies run
it off the event loop, after `shared_identity`)."""
SessionLookup = Callable[[str], FoundSession | None]
"""A session cookie's value to its live session (a database read, off the event loop)."""


def bearer_token(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header, else None (as FastAPI's
    `HTTPBearer(auto_error=False)` reads it)."""
    if not authorization:
        return None
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    if not scheme or not token or scheme.lower() != "bearer":
        return None
    return token


def shared_identity(config: ApiConfig, token: str | None) -> Identity | None:
    """The admin identity of the shared SLUICE_API_TOKEN, if `token` is it."""
    if token is None or config.token is None:
        return None
    if hmac.compare_digest(token.encode(), config.token.encode()):
        return Identity(API_USER, Role.ADMIN)
    return None


def needs_identity(config: ApiConfig, needed: Role | None) -> bool:
    """Whether a request needing `needed` (None: a read) must say who it is from."""
    return needed is not None or config.read_auth


def refusal(
    config: ApiConfig, token: str | None, identity: Identity | None, needed: Role | None
) -> ApiError | None:
    """Why a request needing the role `needed` (None: a read) from `identity` (who
    `token` is) is refused: 401 or 403; None if it may go ahead."""
    if not needs_identity(config, needed):
        return None
    if identity is None:
        if token is None:
            return ApiError(
                401,
                "this needs a login (the UI's /login) or 'Authorization: Bearer <token>': "
                "a user's token (`sluice tokens create USER`) or the API's SLUICE_API_TOKEN",
                CHALLENGE,
            )
        return ApiError(
            401, "the bearer token is not valid (unknown, revoked or expired)", CHALLENGE
        )
    wanted = needed or Role.VIEWER
    if not identity.role.may(wanted):
        return ApiError(
            403, f"user {identity.name!r} is a {identity.role}: this needs the {wanted} role"
        )
    return None


def session_ended() -> ApiError:
    return ApiError(
        401, "the login has ended (logged out, expired or its user deleted): log in again"
    )


def csrf_refusal(found: FoundSession, given: str | None) -> ApiError | None:
    """403 unless `given` (the X-CSRF-Token header) is the session's CSRF token."""
    if given is not None and hmac.compare_digest(given.encode(), found.csrf_token.encode()):
        return None
    return ApiError(
        403,
        f"CSRF token missing or wrong: a write made with the login cookie needs the "
        f"{CSRF_HEADER} header of GET {SESSION_PATH}",
    )


async def resolve(
    config: ApiConfig,
    tokens: TokenLookup,
    sessions: SessionLookup,
    *,
    token: str | None,
    session_id: str | None,
    csrf: str | None,
    write: bool,
    needed: Role | None,
) -> tuple[Identity | None, ApiError | None]:
    """Who a request is from and why it is refused (None: it may go ahead). A bearer
    `token` decides if there is one; else the session cookie's `session_id`, a `write`
    with it needing `csrf` to match. The lookups run in the thread pool."""
    if token is not None or not session_id:
        identity = shared_identity(config, token)
        if identity is None and token is not None:
            identity = await run_sync(tokens, token)
        return identity, refusal(config, token, identity, needed)
    found = await run_sync(sessions, session_id)
    if found is None:
        return None, session_ended() if needs_identity(config, needed) else None
    if write:
        refused = csrf_refusal(found, csrf)
        if refused is not None:
            return found.identity, refused
    return found.identity, refusal(config, None, found.identity, needed)
