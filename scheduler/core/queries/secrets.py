"""The rows of connections and variables (`connection`, `variable`): each value is a
Fernet token, read and written as is here (`core.secrets_store` encrypts and decrypts).

Functions take a session and never commit; the caller owns the transaction.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from sluice.scheduler.core.models import StoredConnection, StoredVariable
from sluice.scheduler.core.upsert import insert_unless_clash, upsert


def insert_connection(session: Session, name: str, token: str, now: dt.datetime) -> bool:
    """Add connection `name`; False (nothing written) if it exists."""
    values = {"name": name, "value": token, "created_at": now, "updated_at": now}
    return insert_unless_clash(session, StoredConnection, values) is not None


def connection_token(session: Session, name: str) -> str | None:
    return session.scalar(select(StoredConnection.value).where(StoredConnection.name == name))


def connection_tokens(session: Session) -> list[tuple[str, str]]:
    """(name, token) of every connection, by name."""
    rows = session.execute(
        select(StoredConnection.name, StoredConnection.value).order_by(StoredConnection.name)
    )
    return [(name, token) for name, token in rows]


def delete_connection(session: Session, name: str) -> bool:
    """Delete connection `name`; False if there was none."""
    gone = session.execute(
        delete(StoredConnection)
        .where(StoredConnection.name == name)
        .returning(StoredConnection.name)
    )
    return gone.first() is not None


def put_variable(
    session: Session, key: str, token: str, *, is_secret: bool, now: dt.datetime
) -> None:
    """Set variable `key` (its value and secrecy replaced; `created_at` kept)."""
    values = {
        "key": key,
        "value": token,
        "is_secret": is_secret,
        "created_at": now,
        "updated_at": now,
    }
    upsert(
        session,
        StoredVariable,
        values,
        keys=["key"],
        update=["value", "is_secret", "updated_at"],
    )


def variable_token(session: Session, key: str) -> tuple[str, bool] | None:
    """(token, is_secret) of variable `key`, or None."""
    row = session.execute(
        select(StoredVariable.value, StoredVariable.is_secret).where(StoredVariable.key == key)
    ).first()
    return None if row is None else (row.value, bool(row.is_secret))


def variable_tokens(session: Session) -> list[tuple[str, str, bool]]:
    """(key, token, is_secret) of every variable, by key."""
    rows = session.execute(
        select(StoredVariable.key, StoredVariable.value, StoredVariable.is_secret).order_by(
            StoredVariable.key
        )
    )
    return [(key, token, bool(secret)) for key, token, secret in rows]


def delete_variable(session: Session, key: str) -> bool:
    """Delete variable `key`; False if there was none."""
    gone = session.execute(
        delete(StoredVariable).where(StoredVariable.key == key).returning(StoredVariable.key)
    )
    return gone.first() is not None


def lock_every_token(session: Session) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(name, token) of every connection and (key, token) of every variable, their rows
    locked `FOR UPDATE` (connections first, each table in key order) until the caller's
    transaction ends: a rotation rewrites them all, and no write in between is lost."""
    conns = session.execute(
        select(StoredConnection.name, StoredConnection.value)
        .order_by(StoredConnection.name)
        .with_for_update()
    )
    variables = session.execute(
        select(StoredVariable.key, StoredVariable.value)
        .order_by(StoredVariable.key)
        .with_for_update()
    )
    return [(n, t) for n, t in conns], [(k, t) for k, t in variables]


def rewrite_tokens(
    session: Session,
    connections: dict[str, str],
    variables: dict[str, str],
) -> None:
    """Replace the tokens of the connections and variables named (their text unchanged:
    `updated_at` stays the time of the value's last change)."""
    for name, token in connections.items():
        session.execute(
            update(StoredConnection).where(StoredConnection.name == name).values(value=token)
        )
    for key, token in variables.items():
        session.execute(update(StoredVariable).where(StoredVariable.key == key).values(value=token))
