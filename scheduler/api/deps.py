"""FastAPI dependencies: the app's state, a session per request, and the auth checks.

Auth rule: every write needs `Authorization: Bearer <SLUICE_API_TOKEN>`; without
the variable set, writes are refused (403) with the reason. Reads are open
unless `SLUICE_API_READ_AUTH=1`. Tokens are compared in constant time.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from sluice.scheduler.api.errors import ApiError
from sluice.scheduler.api.state import ApiState

bearer = HTTPBearer(auto_error=False, description="the value of SLUICE_API_TOKEN")

Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]


def api_state(request: Request) -> ApiState:
    state: ApiState = request.app.state.sluice
    return state


State = Annotated[ApiState, Depends(api_state)]


def db_session(state: State) -> Iterator[Session]:
    with state.factory() as session:
        yield session


DbSession = Annotated[Session, Depends(db_session)]


def _check_token(state: ApiState, credentials: HTTPAuthorizationCredentials | None) -> None:
    expected = state.config.token
    assert expected is not None
    if credentials is None:
        raise ApiError(
            401,
            "this needs 'Authorization: Bearer <token>' with the API's SLUICE_API_TOKEN",
            {"WWW-Authenticate": "Bearer"},
        )
    if not hmac.compare_digest(credentials.credentials.encode(), expected.encode()):
        raise ApiError(401, "the bearer token is not valid", {"WWW-Authenticate": "Bearer"})


def require_write(state: State, credentials: Credentials) -> None:
    if state.config.token is None:
        raise ApiError(
            403,
            "writes are disabled: the API server has no SLUICE_API_TOKEN; "
            "set it and send 'Authorization: Bearer <token>'",
        )
    _check_token(state, credentials)


def require_read(state: State, credentials: Credentials) -> None:
    if not state.config.read_auth:
        return
    if state.config.token is None:
        raise ApiError(
            403,
            "reads are disabled: SLUICE_API_READ_AUTH=1 but the API server has no SLUICE_API_TOKEN",
        )
    _check_token(state, credentials)


CanRead = Depends(require_read)
CanWrite = Depends(require_write)
