"""The bearer-token rules, as plain functions: the route dependencies (`deps`) and the
request guard in front of the app (`guard`) both decide with them, so they always agree.

Who a request is from: the shared `SLUICE_API_TOKEN` is an admin (its
holder is `API_USER`); any other bearer value is looked up as a user's token
(`core.queries.users.identity_of_token`: not revoked, not expired). What it may do
(`refusal`): reads are open unless `SLUICE_API_READ_AUTH=1`, then they need a viewer at
least; writes need an operator (trigger, clear, mark, cancel, events, notes) or an
admin (pools, users, tokens). No token or one that is not valid: 401; a role too low:
403. The shared token is compared in constant time.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable

from sluice.scheduler.api.config import ApiConfig
from sluice.scheduler.api.errors import ApiError
from sluice.scheduler.core.queries.users import Identity
from sluice.scheduler.core.roles import Role

CHALLENGE = {"WWW-Authenticate": "Bearer"}

API_USER = "api (bearer token)"
"""Who the audit log names for an operation made with the shared SLUICE_API_TOKEN."""

TokenLookup = Callable[[str], Identity | None]
"""A user's token to its identity (a database read: the guard and the dependencies run
it off the event loop, after `shared_identity`)."""


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
                "this needs 'Authorization: Bearer <token>': a user's token "
                "(`sluice tokens create USER`) or the API's SLUICE_API_TOKEN",
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
