"""The bearer-token rules, as plain functions: the route dependencies (`deps`) and the
request guard in front of the app (`guard`) both decide with them, so they always agree.

Rule: every write needs `Authorization: Bearer <SLUICE_API_TOKEN>`; without the
variable set, writes are refused (403) with the reason. Reads are open unless
`SLUICE_API_READ_AUTH=1`. Tokens are compared in constant time.
"""

from __future__ import annotations

import hmac

from sluice.scheduler.api.config import ApiConfig
from sluice.scheduler.api.errors import ApiError

CHALLENGE = {"WWW-Authenticate": "Bearer"}


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


def _token_refusal(expected: str, token: str | None) -> ApiError | None:
    if token is None:
        return ApiError(
            401,
            "this needs 'Authorization: Bearer <token>' with the API's SLUICE_API_TOKEN",
            CHALLENGE,
        )
    if not hmac.compare_digest(token.encode(), expected.encode()):
        return ApiError(401, "the bearer token is not valid", CHALLENGE)
    return None


def write_refusal(config: ApiConfig, token: str | None) -> ApiError | None:
    """Why a write with `token` is refused (403 or 401), or None if it may go ahead."""
    if config.token is None:
        return ApiError(
            403,
            "writes are disabled: the API server has no SLUICE_API_TOKEN; "
            "set it and send 'Authorization: Bearer <token>'",
        )
    return _token_refusal(config.token, token)


def read_refusal(config: ApiConfig, token: str | None) -> ApiError | None:
    """Why a read with `token` is refused (403 or 401), or None if it may go ahead."""
    if not config.read_auth:
        return None
    if config.token is None:
        return ApiError(
            403,
            "reads are disabled: SLUICE_API_READ_AUTH=1 but the API server has no SLUICE_API_TOKEN",
        )
    return _token_refusal(config.token, token)


API_USER = "api (bearer token)"
"""Who the audit log names for an operation made through the API (the token's holder)."""
