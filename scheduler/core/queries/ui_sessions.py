"""Web UI logins in the database (`ui_session`).

A login checks a user's name with one of their tokens (not revoked, not expired) or their
password (scrypt, `core.passwords`), then makes a session: a random id (256 bits) that
only the browser's cookie holds, the table keeping its SHA-256, and a random CSRF token
that the UI sends back on every write. A session is that user for as long as it lasts:
its role is read from the user's row at each request, so a role changed, or a user
deleted (their sessions go with them), takes effect at once.

Functions take a session and never commit; the caller owns the transaction.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import secrets
from dataclasses import dataclass

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from sluice.scheduler.core.models import UiSession, User
from sluice.scheduler.core.passwords import hash_password, verify_password
from sluice.scheduler.core.queries.users import Identity, identity_of_token
from sluice.scheduler.core.roles import Role

MAX_SESSION_ID_CHARS = 100
"""A longer cookie value is no session id of ours: refused without a lookup."""


@functools.cache
def _dummy_hash() -> str:
    """Checked against when the user has no password (or does not exist), so a login
    takes about as long either way: its time tells nothing of who exists."""
    return hash_password(secrets.token_urlsafe(16))


@dataclass(frozen=True)
class FoundSession:
    """A live session: who it is, and the CSRF token its writes must send."""

    identity: Identity
    csrf_token: str


def session_hash(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


def login_identity(
    session: Session,
    name: str,
    *,
    token: str | None = None,
    password: str | None = None,
    now: dt.datetime,
) -> Identity | None:
    """The user `name` if `token` is a valid token of theirs or `password` is theirs;
    None otherwise (no hint of which part was wrong)."""
    if token is not None:
        identity = identity_of_token(session, token, now)
        return identity if identity is not None and identity.name == name else None
    if password is None:
        return None
    user = session.get(User, name)
    stored = user.password_hash if user is not None else None
    matched = verify_password(password, stored if stored is not None else _dummy_hash())
    if user is None or stored is None or not matched:
        return None
    return Identity(user.name, Role(user.role))


def create_session(
    session: Session, user_name: str, now: dt.datetime, lasts: dt.timedelta
) -> tuple[str, str]:
    """A new session of `user_name`: (its id, for the cookie only; its CSRF token). The
    sessions that have ended are deleted on the way."""
    session.execute(delete(UiSession).where(UiSession.expires_at <= now))
    session_id = secrets.token_urlsafe(32)
    csrf = secrets.token_urlsafe(32)
    session.add(
        UiSession(
            id_hash=session_hash(session_id),
            user_name=user_name,
            csrf_token=csrf,
            created_at=now,
            expires_at=now + lasts,
        )
    )
    session.flush()
    return session_id, csrf


def find_session(session: Session, session_id: str, now: dt.datetime) -> FoundSession | None:
    """The live session whose id is `session_id` (not ended, its user still there)."""
    if not session_id or len(session_id) > MAX_SESSION_ID_CHARS:
        return None
    found = session.execute(
        select(UiSession.expires_at, UiSession.csrf_token, User.name, User.role)
        .join(User, User.name == UiSession.user_name)
        .where(UiSession.id_hash == session_hash(session_id))
    ).first()
    if found is None or found.expires_at <= now:
        return None
    return FoundSession(Identity(found.name, Role(found.role)), found.csrf_token)


def end_session(session: Session, session_id: str) -> None:
    """Delete the session (logout); nothing if there is none."""
    if session_id and len(session_id) <= MAX_SESSION_ID_CHARS:
        session.execute(delete(UiSession).where(UiSession.id_hash == session_hash(session_id)))


def end_sessions_of(session: Session, user_name: str) -> None:
    """Delete every session of `user_name` (the user is deleted)."""
    session.execute(delete(UiSession).where(UiSession.user_name == user_name))
