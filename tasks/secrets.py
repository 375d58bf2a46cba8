"""Connections and variables, as a task reads them: `Connection.get(name)` and
`Variable.get(key, default=...)` (`from sluice import Connection, Variable`).

Where a value comes from (the first that has it wins):

1. the environment: `SLUICE_CONN_<NAME>` (a URI) and `SLUICE_VAR_<KEY>`, the name or
   key in capitals;
2. the secrets backends `SLUICE_SECRETS_BACKENDS` enables, in its order: objects of the
   entry point group `sluice.secrets_backends` with the interface `SecretsBackend`;
3. the database (`sluice connections add`, `sluice variables set`), encrypted with Fernet.

This module imports nothing of the scheduler. A worker installs the resolver of the
three (`install_resolver`, `broker.worker.secret_reads`), which also has each secret it
returns masked `***` in the try's log and error; outside a worker (plain Python, a
test) only the environment is read.

Invariants:
- A `Connection`'s `repr` never shows its password.
- Names and keys are 1 to `NAME_MAX` characters, without control characters or end
  spaces; a value, a URI and a stored connection are at most `VALUE_MAX_BYTES` of UTF-8.
  A bad one is a `SecretInputError` (one line).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

CONN_PREFIX = "SLUICE_CONN_"
VAR_PREFIX = "SLUICE_VAR_"
ENTRY_POINT_GROUP = "sluice.secrets_backends"
"""The entry point group of secrets backends (`SecretsBackend`)."""

NAME_MAX = 250
"""Longest connection name or variable key (characters): the tables' keys are VARCHAR(250)."""
VALUE_MAX_BYTES = 64 * 1024
"""Longest variable value, connection URI or stored connection (UTF-8 bytes)."""
PORT_MAX = 65535

FIELDS = ("conn_type", "host", "port", "login", "password", "schema", "extra")
"""A connection's fields, as `--json` and the stored JSON name them."""
_EXTRA_KEY = "__extra__"
"""The query parameter of a URI that holds a connection's `extra` as JSON (when a value
of it is not a string)."""
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*")


class SecretInputError(ValueError):
    """A name, key, value or URI that cannot be used; the message is one line."""


class SecretNotFound(KeyError):
    """A connection or variable that no source has. `str()` is the message (a plain
    `KeyError` shows its quoted repr)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class ConnectionNotFound(SecretNotFound):
    """`Connection.get` of a name that no source has."""


class VariableNotFound(SecretNotFound):
    """`Variable.get` of a key that no source has, without a default."""


def check_name(value: object, what: str = "name") -> str:
    """`value` if it can name a connection or a variable, else a SecretInputError."""
    if not isinstance(value, str) or not value:
        raise SecretInputError(f"a {what} must be non-empty text")
    if len(value) > NAME_MAX:
        raise SecretInputError(f"a {what} must be at most {NAME_MAX} characters")
    if value != value.strip():
        raise SecretInputError(f"a {what} must not start or end with spaces")
    _check_text(value, what)
    return value


def check_value(value: object, what: str = "value") -> str:
    """`value` if it can be stored (text, at most `VALUE_MAX_BYTES`), else a SecretInputError."""
    if not isinstance(value, str):
        raise SecretInputError(f"a {what} must be text")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise SecretInputError(f"a {what} must be valid UTF-8 text") from None
    if size > VALUE_MAX_BYTES:
        raise SecretInputError(f"a {what} must be at most {VALUE_MAX_BYTES} bytes, got {size}")
    return value


def _check_text(value: str, what: str) -> None:
    """No C0 or C1 control character, no DEL, valid UTF-8."""
    check_value(value, what)
    if any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in value):
        raise SecretInputError(f"a {what} must not contain control characters")


def env_name(prefix: str, name: str) -> str:
    """The variable of a connection (`CONN_PREFIX`) or variable (`VAR_PREFIX`) name."""
    return prefix + name.upper()


@dataclass(frozen=True, repr=False)
class Connection:
    """How to reach a system: a database, an API. `uri` gives it as one URI.

    `Connection.get(name)` reads it (see the module); `Connection.from_uri` parses one.
    """

    conn_type: str | None = None
    host: str | None = None
    port: int | None = None
    login: str | None = None
    password: str | None = None
    schema: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        kind = self.conn_type
        if kind is not None and (
            not isinstance(kind, str) or len(kind) > NAME_MAX or not _SCHEME.fullmatch(kind)
        ):
            raise SecretInputError(
                "a connection's type must be a URI scheme (a letter, then letters, digits, "
                f"'+', '-' or '.'), got {_shown(self.conn_type)}"
            )
        for name in ("host", "login", "password", "schema"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise SecretInputError(f"a connection's {name} must be text or null")
            if value is not None:
                check_value(value, f"connection's {name}")
        port = self.port
        if port is not None and (
            isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= PORT_MAX
        ):
            raise SecretInputError(
                f"a connection's port must be a whole number from 1 to {PORT_MAX}, "
                f"got {_shown(port)}"
            )
        if not isinstance(self.extra, Mapping):
            raise SecretInputError("a connection's extra must be a JSON object")

    def __repr__(self) -> str:
        shown = {name: getattr(self, name) for name in FIELDS}
        if shown["password"] is not None:
            shown["password"] = "***"
        return "Connection(" + ", ".join(f"{k}={v!r}" for k, v in shown.items()) + ")"

    @classmethod
    def get(cls, name: str) -> Connection:
        """The connection `name` (see the module for where it is read); a
        `ConnectionNotFound` naming it if no source has it."""
        check_name(name, "connection name")
        resolver = _resolver
        found = (resolver or EnvironmentBackend()).get_connection(name)
        if found is None:
            variable = env_name(CONN_PREFIX, name)
            where = (
                f"not in {variable}, the secrets backends nor the database"
                if resolver is not None
                else f"{variable} is not set (outside a worker only the environment is read)"
            )
            raise ConnectionNotFound(f"no connection {name!r}: {where}")
        if isinstance(found, Connection):
            return found
        try:
            return cls.from_uri(found)
        except SecretInputError as exc:
            raise SecretInputError(f"connection {name!r}: {exc}") from None

    @classmethod
    def from_uri(cls, uri: str) -> Connection:
        """`type://login:password@host:port/schema?key=value`: each part percent-decoded,
        the query as `extra` (or `__extra__=<JSON object>`). `//host...` (no type) too.
        A SecretInputError (one line, without the URI) if it is not such a URI."""
        check_value(uri, "connection URI")
        if any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in uri):
            raise SecretInputError("a connection URI must not contain control characters")
        scheme, sep, _ = uri.partition("://")
        if not sep and not uri.startswith("//"):
            raise SecretInputError(
                "a connection URI must be type://login:password@host:port/schema"
            )
        if sep and not _SCHEME.fullmatch(scheme):
            raise SecretInputError(
                "a connection URI must start with its type, a URI scheme (e.g. postgresql://)"
            )
        try:
            parts = urlsplit(uri)
        except ValueError:  # a bad [IPv6] host
            raise SecretInputError("a connection URI has a bad host") from None
        if parts.fragment or uri.endswith("#"):
            raise SecretInputError(
                "a connection URI must not hold a '#': percent-encode it (%23) in a password"
            )
        userinfo, at, hostport = parts.netloc.rpartition("@")
        login, colon, password = userinfo.partition(":")
        host, port = _host_port(hostport)
        return cls(
            conn_type=scheme if sep else None,
            host=host,
            port=port,
            login=unquote(login) if at and login else None,
            password=unquote(password) if colon and password else None,
            schema=unquote(parts.path[1:]) if len(parts.path) > 1 else None,
            extra=_extra_of(parts.query),
        )

    @property
    def uri(self) -> str:
        """The connection as one URI (`from_uri` reads it back): each part
        percent-encoded; `extra` as the query, or as `__extra__=<JSON>` when a value of it
        is not a string; `//…` when it has no type."""
        netloc = ""
        if self.login is not None or self.password is not None:
            netloc = quote(self.login or "", safe="")
            if self.password is not None:
                netloc += ":" + quote(self.password, safe="")
            netloc += "@"
        if self.host:
            netloc += f"[{self.host}]" if ":" in self.host else quote(self.host, safe="")
        if self.port is not None:
            netloc += f":{self.port}"
        uri = f"{self.conn_type}://{netloc}" if self.conn_type else f"//{netloc}"
        if self.schema:
            uri += "/" + quote(self.schema, safe="")
        if self.extra:
            flat = all(isinstance(v, str) for v in self.extra.values()) and _EXTRA_KEY not in (
                self.extra
            )
            query = dict(self.extra) if flat else {_EXTRA_KEY: json.dumps(dict(self.extra))}
            uri += "?" + urlencode(query, quote_via=quote)
        return uri

    def as_dict(self) -> dict[str, Any]:
        """The fields as the stored JSON holds them (`from_dict` reads it back)."""
        return {name: getattr(self, name) for name in FIELDS} | {"extra": dict(self.extra)}

    @classmethod
    def from_dict(cls, data: object) -> Connection:
        """A connection from a JSON object of `FIELDS` (each optional); a SecretInputError
        naming an unknown field or a bad value."""
        if not isinstance(data, dict):
            raise SecretInputError("a connection must be a JSON object")
        unknown = sorted(set(data) - set(FIELDS))
        if unknown:
            raise SecretInputError(
                f"a connection has no field {_shown(unknown[0])} (its fields: {', '.join(FIELDS)})"
            )
        extra = data.get("extra")
        if extra is not None and not isinstance(extra, dict):
            raise SecretInputError("a connection's extra must be a JSON object")
        return cls(**{**data, "extra": extra or {}})


def _host_port(hostport: str) -> tuple[str | None, int | None]:
    """The host (percent-decoded; an IPv6 address without its brackets) and the port."""
    if hostport.startswith("["):
        host, bracket, rest = hostport[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise SecretInputError("a connection URI has a bad [IPv6] host")
        port_text = rest[1:] if rest else ""
    else:
        host, _, port_text = hostport.partition(":")
    port: int | None = None
    if port_text:
        port = int(port_text) if port_text.isascii() and port_text.isdigit() else 0
        if not 1 <= port <= PORT_MAX:
            raise SecretInputError(f"a connection URI's port must be a number from 1 to {PORT_MAX}")
    return (unquote(host) or None), port


def _extra_of(query: str) -> dict[str, Any]:
    if not query:
        return {}
    pairs = parse_qsl(query, keep_blank_values=True)
    extra: dict[str, Any] = {}
    for key, value in pairs:
        if key == _EXTRA_KEY:
            try:
                loaded = json.loads(value)
            except ValueError:
                raise SecretInputError(f"a connection URI's {_EXTRA_KEY} must be JSON") from None
            if not isinstance(loaded, dict):
                raise SecretInputError(f"a connection URI's {_EXTRA_KEY} must be a JSON object")
            extra.update(loaded)
        else:
            extra[key] = value
    return extra


def _shown(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 4]}...{text[-1]}"


_MISSING: Any = object()


class Variable:
    """A setting a task reads by key: `Variable.get(key, default=...)` (see the module)."""

    @classmethod
    def get(cls, key: str, default: Any = _MISSING) -> Any:
        """The value of `key` (text); `default` when no source has it, or a
        `VariableNotFound` naming it when no default is given."""
        check_name(key, "variable key")
        resolver = _resolver
        found = (resolver or EnvironmentBackend()).get_variable(key)
        if found is not None:
            return found
        if default is not _MISSING:
            return default
        variable = env_name(VAR_PREFIX, key)
        where = (
            f"not in {variable}, the secrets backends nor the database"
            if resolver is not None
            else f"{variable} is not set (outside a worker only the environment is read)"
        )
        raise VariableNotFound(f"no variable {key!r}: {where}")


class SecretsBackend(Protocol):
    """Where connections and variables may come from, besides the environment and the
    database. A package offers one as an entry point of the group `sluice.secrets_backends`
    (`name = "package.module:Factory"`); `SLUICE_SECRETS_BACKENDS=name,...` enables it.
    The factory is called once per process without arguments.

    Each method answers None when the backend does not have the name or key (the next
    source is asked). `get_connection` may answer a URI instead of a `Connection`. An
    exception fails the task that asked. A variable a backend gives is masked in the
    try's log, as a secret."""

    def get_connection(self, name: str) -> Connection | str | None: ...

    def get_variable(self, key: str) -> str | None: ...


class EnvironmentBackend:
    """`SLUICE_CONN_<NAME>` (a URI) and `SLUICE_VAR_<KEY>` of `environ` (this process's
    environment by default, read at each call)."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self._environ = environ

    def get_connection(self, name: str) -> str | None:
        environ = os.environ if self._environ is None else self._environ
        return environ.get(env_name(CONN_PREFIX, name)) or None

    def get_variable(self, key: str) -> str | None:
        environ = os.environ if self._environ is None else self._environ
        return environ.get(env_name(VAR_PREFIX, key))


_resolver: SecretsBackend | None = None
"""What `Connection.get` and `Variable.get` ask (None: the environment only)."""


def install_resolver(resolver: SecretsBackend | None) -> SecretsBackend | None:
    """Make `resolver` answer every `Connection.get` and `Variable.get` of this process
    (a worker's: the environment, the backends, the database); None: the environment
    only. Returns the resolver it replaced."""
    global _resolver
    previous, _resolver = _resolver, resolver
    return previous


def current_resolver() -> SecretsBackend | None:
    """The installed resolver, if any."""
    return _resolver
