"""`/api/v1/users` and `/api/v1/tokens`: an admin manages people and their tokens, as
`sluice users` and `sluice tokens` do. A new token is in its creation's answer only;
lists never hold a token. Bad input: 422 (no such user: 404; a name taken: 409), and
nothing is written."""

from __future__ import annotations

import datetime as dt

from fastapi import APIRouter
from pydantic import BaseModel, Field

from sluice.scheduler.api.deps import CanAdmin, DbSession
from sluice.scheduler.api.errors import ApiError, not_found, unprocessable
from sluice.scheduler.api.responses import errors
from sluice.scheduler.core.db import utcnow
from sluice.scheduler.core.models import ApiToken
from sluice.scheduler.core.queries import users as store
from sluice.scheduler.core.roles import Role

router = APIRouter(prefix="/api/v1", tags=["users"])
MAX_EXPIRY_DAYS = 3650


class UserIn(BaseModel):
    name: str = Field(max_length=store.NAME_MAX)
    role: Role


class UserOut(BaseModel):
    name: str
    role: Role
    has_password: bool
    created_at: dt.datetime


class UserList(BaseModel):
    users: list[UserOut]


class TokenIn(BaseModel):
    expires_days: int | None = Field(default=None, ge=1, le=MAX_EXPIRY_DAYS)


class TokenOut(BaseModel):
    id: int
    user: str
    created_at: dt.datetime
    expires_at: dt.datetime | None
    last_used_at: dt.datetime | None
    revoked_at: dt.datetime | None


class NewToken(TokenOut):
    token: str = Field(description="the token itself: shown here once, never again")


class TokenList(BaseModel):
    tokens: list[TokenOut]


def _token_out(row: ApiToken) -> TokenOut:
    return TokenOut(
        id=row.id,
        user=row.user_name,
        created_at=row.created_at,
        expires_at=row.expires_at,
        last_used_at=row.last_used_at,
        revoked_at=row.revoked_at,
    )


def _refused(exc: store.UserError) -> ApiError:
    text = str(exc)
    if text.startswith("no "):
        return not_found(text)
    if "exists already" in text:
        return ApiError(409, text)
    return unprocessable(text)


@router.get("/users", response_model=UserList, dependencies=[CanAdmin], responses=errors())
def list_users(session: DbSession) -> UserList:
    """Every user, its role and whether it has a password."""
    return UserList(
        users=[
            UserOut(
                name=u.name,
                role=Role(u.role),
                has_password=u.password_hash is not None,
                created_at=u.created_at,
            )
            for u in store.users(session)
        ]
    )


@router.post(
    "/users",
    response_model=UserOut,
    status_code=201,
    dependencies=[CanAdmin],
    responses=errors(409),
)
def create_user(body: UserIn, session: DbSession) -> UserOut:
    """A user with a role (409 if the name is taken)."""
    try:
        user = store.create_user(session, body.name, body.role, utcnow())
    except store.UserError as exc:
        raise _refused(exc) from None
    return UserOut(name=user.name, role=body.role, has_password=False, created_at=user.created_at)


@router.delete("/users/{name}", status_code=204, dependencies=[CanAdmin], responses=errors(404))
def delete_user(name: str, session: DbSession) -> None:
    """The user and every token of theirs."""
    try:
        store.delete_user(session, name)
    except store.UserError as exc:
        raise _refused(exc) from None


@router.post(
    "/users/{name}/tokens",
    response_model=NewToken,
    status_code=201,
    dependencies=[CanAdmin],
    responses=errors(404),
)
def create_token(name: str, body: TokenIn, session: DbSession) -> NewToken:
    """A new token of the user, in this answer only."""
    days = body.expires_days
    try:
        row, token = store.create_token(
            session, name, utcnow(), dt.timedelta(days=days) if days is not None else None
        )
    except store.UserError as exc:
        raise _refused(exc) from None
    return NewToken(**_token_out(row).model_dump(), token=token)


@router.get("/tokens", response_model=TokenList, dependencies=[CanAdmin], responses=errors())
def list_tokens(session: DbSession) -> TokenList:
    """Every token's id, user and dates; never a token."""
    return TokenList(tokens=[_token_out(t) for t in store.tokens(session)])


@router.post(
    "/tokens/{token_id}/revoke",
    response_model=TokenOut,
    dependencies=[CanAdmin],
    responses=errors(404),
)
def revoke_token(token_id: int, session: DbSession) -> TokenOut:
    """Refuse the token from now on."""
    try:
        store.revoke_token(session, token_id, utcnow())
    except store.UserError as exc:
        raise _refused(exc) from None
    row = session.get(ApiToken, token_id)
    assert row is not None
    return _token_out(row)
