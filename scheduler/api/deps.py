"""FastAPI dependencies: the app's state, a session per request, and the auth checks.

Auth rule (`auth`): every write needs `Authorization: Bearer <SLUICE_API_TOKEN>`;
without the variable set, writes are refused (403) with the reason. Reads are open
unless `SLUICE_API_READ_AUTH=1`. A write with a body is refused before its body is
read, by `guard.RequestGuard`; these dependencies decide again, by the same rules.

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

from sluice.scheduler.api.auth import read_refusal, write_refusal
from sluice.scheduler.api.state import ApiState

bearer = HTTPBearer(auto_error=False, description="the value of SLUICE_API_TOKEN")

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


async def require_write(state: State, credentials: Credentials) -> None:
    refusal = write_refusal(state.config, _token(credentials))
    if refusal is not None:
        raise refusal


async def require_read(state: State, credentials: Credentials) -> None:
    refusal = read_refusal(state.config, _token(credentials))
    if refusal is not None:
        raise refusal


CanRead = Depends(require_read)
CanWrite = Depends(require_write)
