"""People and their API tokens in the database (`sluice_user`, `api_token`).

A token is `slu_` and 43 random URL-safe characters (256 bits), shown once, when it is
made; the table keeps its SHA-256 (a random token needs no slow hash: nothing can be
guessed from it). Looking a token up is one query by that unique hash.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import secrets
from dataclasses import dataclass

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from sluice.scheduler.core.models import ApiToken, UiSession, User
from sluice.scheduler.core.roles import Role
from sluice.tasks.control_chars import first_control_char

TOKEN_PREFIX = "slu_"
NAME_MAX = 250
MAX_TOKEN_CHARS = 200
"""A longer bearer value is no token of ours: refused without a lookup."""
LAST_USED_EVERY = dt.timedelta(minutes=1)
"""`last_used_at` is written at most this often per token (not a write per request)."""


class UserError(ValueError):
    """A refused user or token operation: one line for the CLI (exit 2) or the API."""


def check_user_name(name: str) -> str:
    if not 1 <= len(name) <= NAME_MAX or name != name.strip():
        raise UserError(f"a user name is 1 to {NAME_MAX} characters without end spaces")
    if first_control_char(name) is not None:
        raise UserError("a user name must not contain control characters")
    return name


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_user(session: Session, name: str, role: Role, now: dt.datetime) -> User:
    check_user_name(name)
    if session.get(User, name) is not None:
        raise UserError(f"user {name!r} exists already")
    user = User(name=name, role=role.value, password_hash=None, created_at=now)
    session.add(user)
    session.flush()
    return user


def delete_user(session: Session, name: str) -> None:
    """The user, every token of theirs and every web UI session of theirs."""
    if session.get(User, name) is None:
        raise UserError(f"no user {name!r}")
    session.execute(delete(ApiToken).where(ApiToken.user_name == name))
    session.execute(delete(UiSession).where(UiSession.user_name == name))
    session.execute(delete(User).where(User.name == name))


def users(session: Session) -> list[User]:
    return list(session.scalars(select(User).order_by(User.name)))


def set_password_hash(session: Session, name: str, password_hash: str) -> None:
    user = session.get(User, name)
    if user is None:
        raise UserError(f"no user {name!r}")
    user.password_hash = password_hash


def create_token(
    session: Session, user_name: str, now: dt.datetime, expires_in: dt.timedelta | None
) -> tuple[ApiToken, str]:
    """A new token of `user_name`: its row and the token itself (to show once)."""
    if session.get(User, user_name) is None:
        raise UserError(f"no user {user_name!r}")
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    row = ApiToken(
        user_name=user_name,
        token_hash=token_hash(token),
        created_at=now,
        expires_at=now + expires_in if expires_in is not None else None,
    )
    session.add(row)
    session.flush()
    return row, token


def tokens(session: Session) -> list[ApiToken]:
    return list(session.scalars(select(ApiToken).order_by(ApiToken.id)))


def revoke_token(session: Session, token_id: int, now: dt.datetime) -> None:
    row = session.get(ApiToken, token_id)
    if row is None:
        raise UserError(f"no token {token_id}")
    if row.revoked_at is None:
        row.revoked_at = now


@dataclass(frozen=True)
class Identity:
    """Who a request is from: a user's name (or the shared token's holder) and role."""

    name: str
    role: Role


def identity_of_token(session: Session, token: str, now: dt.datetime) -> Identity | None:
    """The user whose valid token `token` is (not revoked, not expired), marking it used;
    None for any other value."""
    if not token.startswith(TOKEN_PREFIX) or len(token) > MAX_TOKEN_CHARS:
        return None
    found = session.execute(
        select(ApiToken.id, ApiToken.expires_at, ApiToken.revoked_at, ApiToken.last_used_at, User)
        .join(User, User.name == ApiToken.user_name)
        .where(ApiToken.token_hash == token_hash(token))
    ).first()
    if found is None:
        return None
    token_id, expires_at, revoked_at, last_used_at, user = found
    if revoked_at is not None or (expires_at is not None and expires_at <= now):
        return None
    if last_used_at is None or now - last_used_at >= LAST_USED_EVERY:
        session.execute(update(ApiToken).where(ApiToken.id == token_id).values(last_used_at=now))
    return Identity(user.name, Role(user.role))
