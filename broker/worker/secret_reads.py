"""What `Connection.get` and `Variable.get` answer in a worker, and the masking of what
they answer.

`use_worker_secrets(ctx)` installs, once per process and context, the resolver
`WorkerSecrets` (`tasks.secrets.install_resolver`); the runner calls it before each try
(an attribute read and two identity checks when it is installed). The resolver asks, the
first that has it wins:

1. the environment: `SLUICE_CONN_<NAME>` (a URI), `SLUICE_VAR_<KEY>`;
2. the backends `SLUICE_SECRETS_BACKENDS` enables (`core.secrets_backends`), loaded at
   their first lookup;
3. the database (`core.secrets_store.DatabaseSecrets`), one short read per lookup.

Nothing is read before a task asks: a try that reads no secret costs no query.

Every secret it answers joins the masker of the try that asked (the log capture of the
calling thread, which threads the task starts inherit: `task_logs.current_capture`): a
connection's password (decoded, and as written in its URI) and the value of a variable
set with `--secret` or given by a backend. A variable of the environment is no secret
(put secrets in a connection, or in the database with `--secret`).
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

from sqlalchemy.orm import Session, sessionmaker

from sluice.broker.worker.context import WorkerContext
from sluice.broker.worker.task_logs import current_capture
from sluice.scheduler.core.secrets_backends import enabled_backends
from sluice.scheduler.core.secrets_store import DatabaseSecrets
from sluice.scheduler.core.settings import Settings
from sluice.tasks.secrets import (
    CONN_PREFIX,
    Connection,
    EnvironmentBackend,
    SecretInputError,
    current_resolver,
    env_name,
    install_resolver,
)


class WorkerSecrets:
    """The environment, the enabled backends, then the database (see the module)."""

    def __init__(self, factory: sessionmaker[Session], settings: Settings) -> None:
        self.factory = factory
        self.settings = settings
        self._environment = EnvironmentBackend()
        self._database = DatabaseSecrets(factory, settings)

    def get_connection(self, name: str) -> Connection | None:
        found = self._environment.get_connection(name)
        if found is not None:
            return _revealed(_parsed(found, env_name(CONN_PREFIX, name)), found)
        for number, backend in enumerate(enabled_backends(self.settings)):
            given = backend.get_connection(name)
            if given is not None:
                if isinstance(given, Connection):
                    return _revealed(given)
                where = f"secrets backend {self.settings.secrets_backends[number]!r}"
                return _revealed(_parsed(given, where), given)
        stored = self._database.get_connection(name)
        return None if stored is None else _revealed(stored)

    def get_variable(self, key: str) -> str | None:
        found = self._environment.get_variable(key)
        if found is not None:
            return found
        for backend in enabled_backends(self.settings):
            given = backend.get_variable(key)
            if given is not None:
                reveal([given])
                return given
        stored = self._database.get_variable_entry(key)
        if stored is None:
            return None
        if stored.is_secret:
            reveal([stored.value])
        return stored.value


def _parsed(uri: str, where: str) -> Connection:
    """The connection of `uri`; a bad one's line says where it came from."""
    try:
        return Connection.from_uri(uri)
    except SecretInputError as exc:
        raise SecretInputError(f"{where}: {exc}") from None


def _revealed(conn: Connection, uri: str | None = None) -> Connection:
    """`conn`, its password masked in the calling try from now on: decoded, and as the
    URI it came from writes it (its own quoting)."""
    if conn.password:
        written = _written_password(uri) if uri is not None else None
        reveal([conn.password, *([written] if written else [])])
    return conn


def _written_password(uri: str) -> str | None:
    try:
        return urlsplit(uri).password
    except ValueError:
        return None


def reveal(values: Iterable[str]) -> None:
    """Mask `values` in the calling thread's try from now on (nothing outside a try)."""
    capture = current_capture()
    if capture is not None:
        capture.add_secrets(values)


def use_worker_secrets(ctx: WorkerContext) -> None:
    """Have `Connection.get` and `Variable.get` answered for `ctx`'s tries (idempotent)."""
    current = current_resolver()
    if (
        isinstance(current, WorkerSecrets)
        and current.factory is ctx.session_factory
        and current.settings is ctx.settings
    ):
        return
    install_resolver(WorkerSecrets(ctx.session_factory, ctx.settings))
