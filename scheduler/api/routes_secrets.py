"""`/api/v1/connections` and `/api/v1/variables`: an admin manages what tasks read with
`Connection.get` and `Variable.get`, as `sluice connections` and `sluice variables` do
(`core.secrets_store`: every value stored encrypted with SLUICE_FERNET_KEY).

- No answer holds a connection's password (`***`, as `sluice connections list` shows
  it) nor its extra; a secret variable's value is `***` in lists and gets alike.
- Without SLUICE_FERNET_KEY nothing is stored, nor read back: 409 with one line saying
  so (nothing is ever stored in plain text). A value no key decrypts: 409 naming it.
- Bad input (a name, a key, a value, a URI or a connection that cannot be used): 422,
  and nothing is written. A connection that exists: 409; none: 404.
- Every write is logged naming the user who made it (`sluice.scheduler.api.audit`):
  the audit log's table holds operations on runs and tasks only.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fastapi import APIRouter, Response
from pydantic import BaseModel, ConfigDict, Field

from sluice.scheduler.api.deps import Caller, CanAdmin, DbSession, State
from sluice.scheduler.api.errors import ApiError, not_found, unprocessable
from sluice.scheduler.api.responses import errors
from sluice.scheduler.core.db import utcnow
from sluice.scheduler.core.fernet import NoFernetKey, UndecryptableValue, box_of
from sluice.scheduler.core.queries import secrets as rows
from sluice.scheduler.core.secrets_store import (
    add_connection,
    connection_json,
    list_connections,
    list_variables,
    read_connection,
    read_variable,
    set_variable,
)
from sluice.tasks.secrets import (
    NAME_MAX,
    VALUE_MAX_BYTES,
    Connection,
    SecretInputError,
    check_name,
    check_value,
)

router = APIRouter(prefix="/api/v1", tags=["connections and variables"])
audit = logging.getLogger("sluice.scheduler.api.audit")

MASK = "***"


class ConnectionOut(BaseModel):
    name: str
    conn_type: str | None
    host: str | None
    port: int | None
    login: str | None
    password: str | None = Field(description=f"{MASK!r} when it has one: never the password")
    schema_: str | None = Field(alias="schema", serialization_alias="schema")

    model_config = ConfigDict(populate_by_name=True)


class ConnectionList(BaseModel):
    connections: list[ConnectionOut]


class ConnectionIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(max_length=NAME_MAX)
    uri: str | None = Field(
        default=None,
        max_length=VALUE_MAX_BYTES,
        description="type://login:password@host:port/schema?extra=value",
    )
    connection: dict[str, Any] | None = Field(
        default=None,
        description="or its fields: conn_type, host, port, login, password, schema, extra",
    )


class VariableOut(BaseModel):
    key: str
    value: str = Field(description=f"{MASK!r} for a secret variable")
    secret: bool


class VariableList(BaseModel):
    variables: list[VariableOut]


class VariableIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    value: str = Field(max_length=VALUE_MAX_BYTES)
    secret: bool = Field(default=False, description="masked in task logs and in answers")


@contextmanager
def _refusals() -> Iterator[None]:
    """No key, or a value no key decrypts: 409 with its line; input refused: 422."""
    try:
        yield
    except (NoFernetKey, UndecryptableValue) as exc:
        raise ApiError(409, str(exc)) from None
    except SecretInputError as exc:
        raise unprocessable(str(exc)) from None


def _checked(value: str, what: str) -> str:
    try:
        return check_name(value, what)
    except SecretInputError as exc:
        raise unprocessable(str(exc)) from None


def _connection_out(name: str, conn: Connection) -> ConnectionOut:
    return ConnectionOut(
        name=name,
        conn_type=conn.conn_type,
        host=conn.host,
        port=conn.port,
        login=conn.login,
        password=MASK if conn.password is not None else None,
        schema=conn.schema,
    )


def _variable_out(key: str, value: str, secret: bool) -> VariableOut:
    return VariableOut(key=key, value=MASK if secret else value, secret=secret)


@router.get(
    "/connections",
    response_model=ConnectionList,
    response_model_by_alias=True,
    dependencies=[CanAdmin],
    responses=errors(409),
)
def get_connections(session: DbSession, state: State) -> ConnectionList:
    """Every stored connection, by name; never a password."""
    with _refusals():
        found = list_connections(session, state.settings)
    return ConnectionList(connections=[_connection_out(n, c) for n, c in found])


@router.get(
    "/connections/{name}",
    response_model=ConnectionOut,
    response_model_by_alias=True,
    dependencies=[CanAdmin],
    responses=errors(404, 409),
)
def get_connection(name: str, session: DbSession, state: State) -> ConnectionOut:
    """One stored connection; never its password."""
    name = _checked(name, "connection name")
    with _refusals():
        conn = read_connection(session, state.settings, name)
    if conn is None:
        raise not_found(f"no connection {name!r} is stored")
    return _connection_out(name, conn)


@router.post(
    "/connections",
    response_model=ConnectionOut,
    response_model_by_alias=True,
    status_code=201,
    dependencies=[CanAdmin],
    responses=errors(409),
)
def create_connection(
    body: ConnectionIn, session: DbSession, state: State, caller: Caller
) -> ConnectionOut:
    """Store a connection, encrypted, from a URI or its fields (409 if it exists)."""
    name = _checked(body.name, "connection name")
    if (body.uri is None) == (body.connection is None):
        raise unprocessable("give the connection as either a uri or its fields (connection)")
    with _refusals():
        if body.uri is not None:
            conn = Connection.from_uri(body.uri)
        else:
            conn = Connection.from_dict(body.connection)
        connection_json(conn)  # storable: JSON values, within the bound
        box = box_of(state.settings, f"store connection {name!r}")
        added = add_connection(session, box, name, conn, utcnow())
    if not added:
        raise ApiError(409, f"connection {name!r} exists: delete it first")
    audit.info("connection %r added by %r", name, caller)
    return _connection_out(name, conn)


@router.delete(
    "/connections/{name}", status_code=204, dependencies=[CanAdmin], responses=errors(404)
)
def delete_connection(name: str, session: DbSession, caller: Caller) -> Response:
    """Delete a stored connection."""
    name = _checked(name, "connection name")
    if not rows.delete_connection(session, name):
        raise not_found(f"no connection {name!r} is stored")
    audit.info("connection %r deleted by %r", name, caller)
    return Response(status_code=204)


@router.get(
    "/variables", response_model=VariableList, dependencies=[CanAdmin], responses=errors(409)
)
def get_variables(session: DbSession, state: State) -> VariableList:
    """Every stored variable, by key (a secret one's value: `***`)."""
    with _refusals():
        found = list_variables(session, state.settings)
    return VariableList(variables=[_variable_out(v.key, v.value, v.is_secret) for v in found])


@router.get(
    "/variables/{key}",
    response_model=VariableOut,
    dependencies=[CanAdmin],
    responses=errors(404, 409),
)
def get_variable(key: str, session: DbSession, state: State) -> VariableOut:
    """One stored variable (a secret one's value: `***`)."""
    key = _checked(key, "variable key")
    with _refusals():
        found = read_variable(session, state.settings, key)
    if found is None:
        raise not_found(f"no variable {key!r} is stored")
    return _variable_out(found.key, found.value, found.is_secret)


@router.put(
    "/variables/{key}",
    response_model=VariableOut,
    dependencies=[CanAdmin],
    responses=errors(409),
)
def put_variable(
    key: str, body: VariableIn, session: DbSession, state: State, caller: Caller
) -> VariableOut:
    """Store a variable, encrypted (its value and secrecy replaced if it exists)."""
    key = _checked(key, "variable key")
    with _refusals():
        value = check_value(body.value, "variable's value")
        box = box_of(state.settings, f"store variable {key!r}")
        set_variable(session, box, key, value, is_secret=body.secret, now=utcnow())
    audit.info("variable %r set by %r%s", key, caller, " (secret)" if body.secret else "")
    return _variable_out(key, value, body.secret)


@router.delete("/variables/{key}", status_code=204, dependencies=[CanAdmin], responses=errors(404))
def delete_variable(key: str, session: DbSession, caller: Caller) -> Response:
    """Delete a stored variable."""
    key = _checked(key, "variable key")
    if not rows.delete_variable(session, key):
        raise not_found(f"no variable {key!r} is stored")
    audit.info("variable %r deleted by %r", key, caller)
    return Response(status_code=204)
