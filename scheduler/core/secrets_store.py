"""Connections and variables in the database, encrypted: what the CLI writes and lists,
and what a worker reads for its tasks (`DatabaseSecrets`).

- Every value is stored as a Fernet token (`core.fernet`): a connection's JSON
  (`Connection.as_dict`), a variable's text. Storing needs the key; so does reading a row
  (a name that is not there needs none: a deployment without connections runs without a key).
- Functions take a session and never commit (`core.queries.secrets` holds the SQL);
  `DatabaseSecrets` opens one short read per lookup, only when a task asks.
- `rotate` re-encrypts every row with the first key, all rows locked, in the caller's
  one transaction.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass

from sqlalchemy.orm import Session, sessionmaker

from sluice.scheduler.core.db import single_statement_factory, transaction
from sluice.scheduler.core.fernet import Box, box_of
from sluice.scheduler.core.queries import secrets as rows
from sluice.scheduler.core.settings import Settings
from sluice.tasks.secrets import (
    VALUE_MAX_BYTES,
    Connection,
    SecretInputError,
    check_name,
    check_value,
)


@dataclass(frozen=True)
class StoredVariableValue:
    key: str
    value: str
    is_secret: bool


def connection_json(conn: Connection) -> str:
    """The JSON a connection is stored as; SecretInputError if it cannot be (an extra
    that is not JSON, more than `VALUE_MAX_BYTES`)."""
    try:
        text = json.dumps(conn.as_dict(), separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError):
        raise SecretInputError("a connection's extra must hold JSON values only") from None
    size = len(text.encode("utf-8"))
    if size > VALUE_MAX_BYTES:
        raise SecretInputError(
            f"a connection must be at most {VALUE_MAX_BYTES} bytes as JSON, got {size}"
        )
    return text


def add_connection(
    session: Session, box: Box, name: str, conn: Connection, now: dt.datetime
) -> bool:
    """Store connection `name`, encrypted; False (nothing written) if it exists."""
    token = box.encrypt(connection_json(conn))
    return rows.insert_connection(session, check_name(name, "connection name"), token, now)


def _connection(box: Box, name: str, token: str) -> Connection:
    data = json.loads(box.decrypt(token, f"connection {name!r}"))
    return Connection.from_dict(data)


def read_connection(session: Session, settings: Settings, name: str) -> Connection | None:
    """Connection `name`, decrypted; None if there is none (no key needed then)."""
    token = rows.connection_token(session, name)
    if token is None:
        return None
    return _connection(box_of(settings, f"read connection {name!r}"), name, token)


def list_connections(session: Session, settings: Settings) -> list[tuple[str, Connection]]:
    """Every connection, decrypted, by name (the key is needed only if there is one)."""
    found = rows.connection_tokens(session)
    if not found:
        return []
    box = box_of(settings, "read connections")
    return [(name, _connection(box, name, token)) for name, token in found]


def set_variable(
    session: Session,
    box: Box,
    key: str,
    value: str,
    *,
    is_secret: bool,
    now: dt.datetime,
) -> None:
    """Store variable `key`, encrypted (its value and secrecy replaced if it exists)."""
    check_name(key, "variable key")
    token = box.encrypt(check_value(value, "variable's value"))
    rows.put_variable(session, key, token, is_secret=is_secret, now=now)


def read_variable(session: Session, settings: Settings, key: str) -> StoredVariableValue | None:
    """Variable `key`, decrypted; None if there is none (no key needed then)."""
    found = rows.variable_token(session, key)
    if found is None:
        return None
    token, secret = found
    box = box_of(settings, f"read variable {key!r}")
    return StoredVariableValue(key, box.decrypt(token, f"variable {key!r}"), secret)


def list_variables(session: Session, settings: Settings) -> list[StoredVariableValue]:
    """Every variable, decrypted, by key (the key is needed only if there is one)."""
    found = rows.variable_tokens(session)
    if not found:
        return []
    box = box_of(settings, "read variables")
    return [
        StoredVariableValue(key, box.decrypt(token, f"variable {key!r}"), secret)
        for key, token, secret in found
    ]


def rotate(session: Session, box: Box) -> tuple[int, int]:
    """Re-encrypt every connection and variable with the first key (rows locked until
    the caller commits); (connections, variables) rewritten. A row no key decrypts
    stops it with a line naming the row (UndecryptableValue), before anything is written."""
    conns, variables = rows.lock_every_token(session)
    new_conns = {name: box.rotate(token, f"connection {name!r}") for name, token in conns}
    new_vars = {key: box.rotate(token, f"variable {key!r}") for key, token in variables}
    rows.rewrite_tokens(session, new_conns, new_vars)
    return len(new_conns), len(new_vars)


class DatabaseSecrets:
    """The database as a source of connections and variables (`tasks.secrets.SecretsBackend`):
    one short read per lookup, through the worker's session factory."""

    def __init__(self, factory: sessionmaker[Session], settings: Settings) -> None:
        self._factory = factory
        self._settings = settings

    def get_connection(self, name: str) -> Connection | None:
        with transaction(single_statement_factory(self._factory)) as session:
            return read_connection(session, self._settings, name)

    def get_variable(self, key: str) -> str | None:
        found = self.get_variable_entry(key)
        return None if found is None else found.value

    def get_variable_entry(self, key: str) -> StoredVariableValue | None:
        """The variable with its secrecy (a secret one is masked in the reader's log)."""
        with transaction(single_statement_factory(self._factory)) as session:
            return read_variable(session, self._settings, key)
