"""FastAPI dependencies: the app's state, a session per request, and the auth checks.

Auth rule (`auth`): a write needs `Authorization: Bearer <token>` of an operator (an
admin for pools, users, tokens, connections and variables), the shared SLUICE_API_TOKEN
being an admin's, or the web UI's login cookie with its CSRF token; reads are open unless
`SLUICE_API_READ_AUTH=1`. A write from no one, or from a viewer, or with the cookie but
not its CSRF token, is refused before its body is read, by `guard.RequestGuard`, which
leaves who it is from in the request's state; these dependencies decide again, by the
same rules.

The dependencies that do no I/O are `async`: FastAPI runs a plain `def` dependency in
its thread pool, a hand-off to a thread and back for each, which cost a burst of
triggers more CPU than the routes' own work.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from sluice.scheduler.api.auth import (
    API_USER,
    CSRF_HEADER,
    SESSION_COOKIE,
    needs_identity,
    refusal,
    resolve,
)
from sluice.scheduler.api.errors import ApiError
from sluice.scheduler.api.guard import IDENTITY, SAFE_METHODS
from sluice.scheduler.api.state import ApiState
from sluice.scheduler.core.queries.users import Identity
from sluice.scheduler.core.roles import Role

bearer = HTTPBearer(auto_error=False, description="a user's token, or SLUICE_API_TOKEN")

Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]


async def api_state(request: Request) -> ApiState:
    state: ApiState = request.app.state.sluice
    return state


State = Annotated[ApiState, Depends(api_state)]


async def db_session(state: State) -> AsyncIterator[Session]:
    """The request's session and its one transaction, which this dependency owns: routes
    write and never commit. The transaction is committed once the route has returned and
    its answer is serialized, before the answer is sent (the dependency's scope is the
    route's function, which FastAPI ends after serializing the response); any error before
    that (a 4xx the route raises, an exception, an answer that cannot be serialized, the
    commit itself) rolls it back, so a request answered with an error has written nothing.
    What must follow the commit (waking schedulers, stopping tries) goes in the route's
    `BackgroundTasks`, which run after the answer is sent.

    Made on the event loop (a session connects only at its first statement, in the
    route's thread); committed and closed in the thread pool (round trips)."""
    session = state.factory()
    try:
        yield session
        await run_in_threadpool(session.commit)
    finally:
        await run_in_threadpool(session.close)


DbSession = Annotated[Session, Depends(db_session, scope="function")]


def _token(credentials: HTTPAuthorizationCredentials | None) -> str | None:
    return credentials.credentials if credentials is not None else None


async def _who(
    request: Request, state: State, credentials: Credentials, needed: Role | None
) -> tuple[Identity | None, ApiError | None]:
    """Who the request is from (as the guard found it for a write, else a bearer token or
    the login cookie, looked up in the thread pool) and why it is refused, if it is."""
    token = _token(credentials)
    if hasattr(request.state, IDENTITY):
        found: Identity | None = getattr(request.state, IDENTITY)
        return found, refusal(state.config, token, found, needed)
    return await resolve(
        state.config,
        state.lookup_token,
        state.lookup_session,
        token=token,
        session_id=request.cookies.get(SESSION_COOKIE),
        csrf=request.headers.get(CSRF_HEADER),
        write=request.method not in SAFE_METHODS,
        needed=needed,
    )


async def caller_identity(
    request: Request, state: State, credentials: Credentials
) -> Identity | None:
    """Who the request is from; None without a valid token or login."""
    identity, _ = await _who(request, state, credentials, None)
    return identity


async def _require(
    request: Request, state: State, credentials: Credentials, needed: Role | None
) -> Identity | None:
    if not needs_identity(state.config, needed):
        return None
    identity, refused = await _who(request, state, credentials, needed)
    if refused is not None:
        raise refused
    return identity


async def require_someone(request: Request, state: State, credentials: Credentials) -> None:
    """A viewer at least, whatever SLUICE_API_READ_AUTH says (logging out)."""
    await _require(request, state, credentials, Role.VIEWER)


async def require_read(request: Request, state: State, credentials: Credentials) -> None:
    await _require(request, state, credentials, None)


async def require_write(request: Request, state: State, credentials: Credentials) -> None:
    await _require(request, state, credentials, Role.OPERATOR)


async def require_admin(request: Request, state: State, credentials: Credentials) -> None:
    await _require(request, state, credentials, Role.ADMIN)


async def caller_name(request: Request, state: State, credentials: Credentials) -> str:
    """Who the audit log names for a write (checked already by `require_write`)."""
    identity = await caller_identity(request, state, credentials)
    return identity.name if identity is not None else API_USER


IsSomeone = Depends(require_someone)
CanRead = Depends(require_read)
CanWrite = Depends(require_write)
CanAdmin = Depends(require_admin)
Caller = Annotated[str, Depends(caller_name)]
