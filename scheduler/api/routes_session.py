"""`/api/v1/session`: the web UI's login (`auth` has the rules of the cookie it sets).

- `POST` {user, token} or {user, password}: a token of that user (not revoked, not
  expired) or their password (`sluice users set-password`) makes a session; its id goes
  in the cookie `sluice_session` (HttpOnly, SameSite=Strict, Path=/, Secure when the
  request came over HTTPS), the answer holds who it is and the CSRF token. A wrong
  login: 401 with one line that tells no more (not whether the user exists).
- `GET`: who the cookie's session is, with its CSRF token (401 without a live one).
- `DELETE`: log out: the session is deleted and the cookie cleared (its CSRF token
  needed, as for any write made with the cookie).

A session lasts `ApiConfig.session_lasts` (12 hours); ended sessions are deleted at the
next login.
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated

from fastapi import APIRouter, Cookie, Request, Response
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, Field, model_validator

from sluice.scheduler.api.auth import SESSION_COOKIE
from sluice.scheduler.api.deps import DbSession, IsSomeone, State
from sluice.scheduler.api.errors import ApiError
from sluice.scheduler.api.responses import errors
from sluice.scheduler.core.db import utcnow
from sluice.scheduler.core.passwords import MAX_PASSWORD_BYTES
from sluice.scheduler.core.queries import ui_sessions
from sluice.scheduler.core.queries.users import MAX_TOKEN_CHARS, NAME_MAX
from sluice.scheduler.core.roles import Role

router = APIRouter(prefix="/api/v1/session", tags=["session"])

LoginCookie = Annotated[
    str | None,
    Cookie(alias=SESSION_COOKIE, max_length=500, description="set by POST /api/v1/session"),
]

NO_STORE = {"Cache-Control": "no-store"}
"""The answers hold a CSRF token: no cache keeps them."""


class LoginIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    user: str = Field(min_length=1, max_length=NAME_MAX)
    token: str | None = Field(default=None, min_length=1, max_length=MAX_TOKEN_CHARS)
    password: str | None = Field(default=None, min_length=1, max_length=MAX_PASSWORD_BYTES)

    @model_validator(mode="after")
    def _one_secret(self) -> LoginIn:
        if (self.token is None) == (self.password is None):
            raise ValueError("give either a token or a password")
        return self


class SessionOut(BaseModel):
    user: str
    role: Role
    csrf_token: str = Field(description="send it as X-CSRF-Token with every write")
    expires_at: dt.datetime | None = None


def _login_refused() -> ApiError:
    return ApiError(401, "the user name, token or password is wrong")


def _cookie_flags(request: Request) -> dict[str, object]:
    return {
        "path": "/",
        "httponly": True,
        "samesite": "strict",
        "secure": request.url.scheme == "https",
    }


@router.post("", response_model=SessionOut, responses=errors(401))
def login(
    body: LoginIn, request: Request, response: Response, session: DbSession, state: State
) -> SessionOut:
    """Log in with a token of the user or their password: sets the session cookie."""
    now = utcnow()
    identity = ui_sessions.login_identity(
        session, body.user, token=body.token, password=body.password, now=now
    )
    if identity is None:
        raise _login_refused()
    previous = request.cookies.get(SESSION_COOKIE)
    if previous:
        ui_sessions.end_session(session, previous)
    lasts = state.config.session_lasts
    session_id, csrf = ui_sessions.create_session(session, identity.name, now, lasts)
    response.set_cookie(
        SESSION_COOKIE,
        session_id,
        max_age=int(lasts.total_seconds()),
        **_cookie_flags(request),  # type: ignore[arg-type]
    )
    response.headers.update(NO_STORE)
    return SessionOut(
        user=identity.name, role=identity.role, csrf_token=csrf, expires_at=now + lasts
    )


@router.get("", response_model=SessionOut, responses=errors(401))
async def current_session(
    response: Response, state: State, session_id: LoginCookie = None
) -> SessionOut:
    """Who the session cookie is, and the CSRF token its writes must send."""
    found = await run_in_threadpool(state.lookup_session, session_id) if session_id else None
    if found is None:
        raise ApiError(401, "not logged in: log in at /login", NO_STORE)
    response.headers.update(NO_STORE)
    return SessionOut(
        user=found.identity.name, role=found.identity.role, csrf_token=found.csrf_token
    )


@router.delete("", status_code=204, dependencies=[IsSomeone], responses=errors())
def logout(request: Request, session: DbSession) -> Response:
    """Log out: the session ends and its cookie is cleared."""
    session_id = request.cookies.get(SESSION_COOKIE)
    if session_id:
        ui_sessions.end_session(session, session_id)
    response = Response(status_code=204)
    response.delete_cookie(SESSION_COOKIE, **_cookie_flags(request))  # type: ignore[arg-type]
    return response
