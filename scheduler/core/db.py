"""Engines, sessions and the column types shared by every backend.

Invariants:
- Datetimes are stored and returned as timezone-aware UTC on every backend.
- On SQLite every transaction starts with BEGIN IMMEDIATE: SQLite ignores
  FOR UPDATE, so a single writer at a time stands in for row locks. A reader that
  writes nothing may use `reader_factory` instead, whose reads take no write lock.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import logging
import os
import threading
import time
import weakref
from collections import namedtuple
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, cast

from cachetools import LRUCache
from sqlalchemy import (
    Connection,
    DateTime,
    Engine,
    Executable,
    TypeDecorator,
    create_engine,
    event,
)
from sqlalchemy import text as sql_text
from sqlalchemy.engine import CursorResult, Dialect, make_url
from sqlalchemy.exc import DBAPIError, DisconnectionError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from sluice.scheduler.core.named_sql import HotStatement, Named

log = logging.getLogger(__name__)


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def as_utc(stamp: dt.datetime | None) -> dt.datetime | None:
    """A timestamp a statement run through psycopg gave (aware, in the connection's time
    zone), in UTC, as the ORM gives it (`UtcDateTime`)."""
    return None if stamp is None else stamp.astimezone(dt.UTC)


class UtcDateTime(TypeDecorator[dt.datetime]):
    """A timestamp column that only accepts and returns aware UTC datetimes."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: Dialect) -> Any:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r} cannot be stored; use UTC")
        value = value.astimezone(dt.UTC)
        if dialect.name == "sqlite":
            return value.replace(tzinfo=None)
        return value

    def process_result_value(self, value: Any, dialect: Dialect) -> dt.datetime | None:
        if value is None:
            return None
        stamp: dt.datetime = dt.datetime.fromisoformat(value) if isinstance(value, str) else value
        if stamp.tzinfo is None:
            return stamp.replace(tzinfo=dt.UTC)
        return stamp.astimezone(dt.UTC)


def is_sqlite(url: str) -> bool:
    return url.startswith("sqlite")


IDLE_PING_SECONDS = 10.0
"""A pooled connection idle longer than this is pinged before use."""
CONNECT_TIMEOUT_SECONDS = 10
"""How long a new connection may take (unless the URL sets `connect_timeout`): a host
that drops packets fails an attempt in seconds, not after the system's TCP timeout."""


def make_engine(
    url: str,
    *,
    pool_size: int = 5,
    application_name: str = "sluice",
    autocommit: bool = False,
    idle_in_transaction_timeout: float = 0.0,
) -> Engine:
    """An engine for `url` that survives a restarted database.

    Connections idle for over IDLE_PING_SECONDS are pinged at checkout (a dead one
    is replaced); a connection that dies while in use raises a DBAPIError, which
    the caller's retry loop absorbs, and the pool replaces it. Pinging only idle
    connections keeps the round trip off the hot path (the loop and the worker).
    With `autocommit` (PostgreSQL), every connection of the pool is in autocommit.
    With `idle_in_transaction_timeout` (seconds; 0: none), PostgreSQL ends a session
    idle that long inside a transaction (`_session_options`).
    """
    if is_sqlite(url):
        engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})
        _configure_sqlite(engine)
        return engine
    engine = create_engine(
        url,
        pool_size=pool_size,
        max_overflow=5,
        pool_recycle=1800,
        pool_use_lifo=True,
        connect_args={
            "application_name": application_name,
            **_connect_timeout(url),
            **_session_options(url, idle_in_transaction_timeout),
        },
        **({"isolation_level": "AUTOCOMMIT"} if autocommit else {}),
    )
    _ping_idle_connections(engine)
    _application_names[engine] = application_name
    return engine


def _session_options(url: str, idle_in_transaction_timeout: float) -> dict[str, str]:
    """libpq `options` that add `idle_in_transaction_session_timeout` to the URL's own
    `options` (which win when they set it)."""
    if idle_in_transaction_timeout <= 0:
        return {}
    given = make_url(url).query.get("options") or ""
    if isinstance(given, tuple):
        given = " ".join(given)
    if "idle_in_transaction_session_timeout" in given:
        return {}
    ms = max(1, round(idle_in_transaction_timeout * 1000))
    return {"options": f"{given} -c idle_in_transaction_session_timeout={ms}".strip()}


def _connect_timeout(url: str) -> dict[str, int]:
    """`connect_timeout` for the driver, unless the URL gives its own."""
    if "connect_timeout" in make_url(url).query:
        return {}
    return {"connect_timeout": CONNECT_TIMEOUT_SECONDS}


_application_names: weakref.WeakKeyDictionary[Engine, str] = weakref.WeakKeyDictionary()


def _ping_idle_connections(engine: Engine) -> None:
    @event.listens_for(engine, "checkin")
    def _on_checkin(_dbapi_connection: Any, record: Any) -> None:
        record.info["checked_in"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _on_checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        since = record.info.get("checked_in")
        if since is None or time.monotonic() - since < IDLE_PING_SECONDS:
            return
        _ping(dbapi_connection)


def _ping(dbapi_connection: Any) -> None:
    """SELECT 1 on a connection that sat idle; DisconnectionError if it is dead."""
    try:
        cursor = dbapi_connection.cursor()
        cursor.execute("SELECT 1")
        cursor.close()
        dbapi_connection.rollback()
    except Exception as exc:
        raise DisconnectionError(f"stale pooled connection: {exc}") from exc


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we emit BEGIN ourselves
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False, autoflush=False)


def reader_factory(factory: sessionmaker[Session]) -> sessionmaker[Session]:
    """Sessions for a reader that never writes and must not hold up the writers (a
    watcher reading every fraction of a second): on SQLite, on an engine of its own
    without BEGIN IMMEDIATE, so each read runs on a WAL snapshot and takes no write
    lock; on PostgreSQL, `factory` itself (its reads lock nothing)."""
    engine = factory.kw["bind"]
    if engine.dialect.name != "sqlite":
        return factory
    url = engine.url.render_as_string(hide_password=False)
    reader = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})
    return make_session_factory(reader)


_single_statement_factories: weakref.WeakKeyDictionary[
    sessionmaker[Session], sessionmaker[Session]
] = weakref.WeakKeyDictionary()


def single_statement_factory(factory: sessionmaker[Session]) -> sessionmaker[Session]:
    """Sessions for work of one statement (an atomic compare-and-set with RETURNING):
    on PostgreSQL in autocommit, which spares the BEGIN and COMMIT round trips; on
    SQLite the plain factory (its transactions are BEGIN IMMEDIATE).

    The autocommit sessions come from an engine of their own (same URL, its own pool,
    disposed with the factory's engine): switching a shared pool's connection to
    autocommit and back at every checkout cost more CPU than the statement."""
    cached = _single_statement_factories.get(factory)
    if cached is not None:
        return cached
    engine = factory.kw["bind"]
    made = factory
    if engine.dialect.name == "postgresql":
        autocommit = make_engine(
            engine.url.render_as_string(hide_password=False),
            pool_size=getattr(engine.pool, "size", lambda: 5)(),
            application_name=_application_names.get(engine, "sluice"),
            autocommit=True,
        )
        event.listen(engine, "engine_disposed", lambda *_: autocommit.dispose())
        event.listen(autocommit, "engine_disposed", release_held_connection)
        made = make_session_factory(autocommit)
    _single_statement_factories[factory] = made
    return made


@contextmanager
def transaction(factory: sessionmaker[Session]) -> Iterator[Session]:
    """One short transaction: commits on success, rolls back on any error."""
    with factory() as session, session.begin():
        yield session


Sent = str | tuple[Executable | HotStatement, Mapping[str, Any]]
"""A statement sent with a BEGIN: plain SQL text, or a statement and its parameters (a
`Hot` statement of the `.sql` files: its SQLite twin on SQLite)."""


@dataclass(frozen=True, eq=False)
class Handle:
    """Where one statement of a `Pipeline` stands: its rows are `results[handle]`."""

    pipeline: int
    index: int
    name: str


class Pipeline:
    """Statements that go to the database together, in order: in one query with their
    BEGIN (and COMMIT) on PostgreSQL, one by one inside one transaction on SQLite. Each
    statement's rows are read back by the `Handle` that `add` returned for it."""

    def __init__(self) -> None:
        self.statements: list[Sent] = []
        self.names: list[str] = []

    def add(self, statement: Sent, name: str = "") -> Handle:
        self.statements.append(statement)
        self.names.append(name or f"statement {len(self.statements)}")
        return Handle(id(self), len(self.statements) - 1, self.names[-1])

    def extend(self, statements: Sequence[Sent]) -> list[Handle]:
        return [self.add(statement) for statement in statements]

    def __len__(self) -> int:
        return len(self.statements)


class Results:
    """The rows each statement of a `Pipeline` returned (named tuples, the same on both
    backends), read by handle."""

    def __init__(self, pipeline: Pipeline | None, rows: list[list[Any]]) -> None:
        self._of = id(pipeline) if pipeline is not None else None
        self._rows = rows

    def __getitem__(self, handle: Handle) -> list[Any]:
        if handle.pipeline != self._of:
            raise KeyError(f"{handle.name} is not a statement of this pipeline")
        return self._rows[handle.index]

    def first(self, handle: Handle) -> Any | None:
        """The first row of `handle`'s statement, or None if it returned none."""
        rows = self[handle]
        return rows[0] if rows else None


@functools.lru_cache(maxsize=128)
def _row_type(fields: tuple[str, ...]) -> Any:
    return namedtuple("Row", fields, rename=True)  # noqa: PYI024 - fields known at run time


def executed(session: Session | Connection, statement: Sent) -> list[Any]:
    """`statement` run in `session`'s transaction (or a connection's): its rows as named
    tuples (what the one-query path gives on PostgreSQL), [] for one that returns none. A
    `HotStatement` runs as its `.sql` file says on PostgreSQL (through psycopg's own
    binding: its values as psycopg gives them back), as its twin on SQLite."""
    # Core execution: a CursorResult, rows as they are
    connection = session.connection() if isinstance(session, Session) else session
    result: CursorResult[Any]
    if isinstance(statement, str):
        result = connection.execute(sql_text(statement))
    else:
        stmt, params = statement
        if isinstance(stmt, HotStatement) and connection.dialect.name == "postgresql":
            result = connection.exec_driver_sql(stmt.named.pyformat, dict(params))
        else:
            if isinstance(stmt, HotStatement):
                stmt, params = stmt.on_sqlite(params)
            result = connection.execute(stmt, dict(params))
    if not result.returns_rows:
        return []
    row_type = _row_type(tuple(result.keys()))
    return [row_type(*row) for row in result]


@contextmanager
def transaction_opened_by(
    factory: sessionmaker[Session], opener: Pipeline | None
) -> Iterator[tuple[Session, Results]]:
    """One short transaction, like `transaction`, that runs the `opener` pipeline first
    and yields the session and the opener's results. On PostgreSQL its BEGIN travels
    with the opener's statements in one query: one round trip instead of one per
    statement; on SQLite they run one by one at the start of the transaction.

    Invariant (PostgreSQL): the session's connection is in autocommit mode and the
    transaction is the server's, opened and ended here (COMMIT on success, ROLLBACK on any
    error); the body only executes statements (no ORM flush, no `session.commit()`). A
    database error of the opener is raised as SQLAlchemy's (an OperationalError when the
    connection broke, which is then invalidated), as for any statement. Each statement of
    the opener takes its own snapshot (READ COMMITTED): one that follows a lock sees what
    the lock's previous holder committed.
    """
    single = single_statement_factory(factory)
    if opener is None or not len(opener) or single is factory:
        with transaction(factory) as session:
            rows = [executed(session, s) for s in opener.statements] if opener else []
            yield session, Results(opener, rows)
        return
    connection = held_connection(cast(Engine, single.kw["bind"]))
    with single(bind=connection) as session:
        results = Results(opener, _send(connection, opener.statements))
        try:
            yield session, results
        except BaseException:
            if not connection.invalidated:
                try:
                    connection.exec_driver_sql("ROLLBACK")
                except DBAPIError:
                    connection.invalidate()
            raise
        connection.exec_driver_sql("COMMIT")


def _autocommit_engine(factory: sessionmaker[Session]) -> Engine | None:
    """The autocommit engine of `single_statement_factory(factory)`; None on SQLite."""
    single = single_statement_factory(factory)
    return None if single is factory else cast(Engine, single.kw["bind"])


def committed_at_once(factory: sessionmaker[Session], pipeline: Pipeline) -> Results:
    """`pipeline` in one transaction, committed: on PostgreSQL sent as one simple-protocol
    query, which the server runs as one transaction (an implicit block: committed at the
    end of the query, rolled back on any error; no BEGIN and COMMIT to parse and run), so
    one round trip, and locks are held only while the server runs it; on SQLite one
    statement after the other in a transaction. Errors as for `transaction_opened_by`;
    nothing is committed then."""
    engine = _autocommit_engine(factory)
    if engine is None:
        with transaction(factory) as session:
            return Results(pipeline, [executed(session, s) for s in pipeline.statements])
    return Results(pipeline, _send(held_connection(engine), pipeline.statements, begin=False))


def executed_alone(factory: sessionmaker[Session], statement: Sent) -> list[Any]:
    """One statement in its own transaction: on PostgreSQL in autocommit, as a prepared
    statement, without an ORM session (values as psycopg gives them: no SQLAlchemy result
    processing); on SQLite in a transaction. Its rows, as named tuples."""
    engine = _autocommit_engine(factory)
    if engine is None:
        with transaction(factory) as session:
            return executed(session, statement)
    return list(_send(held_connection(engine), [statement], begin=False)[0])


class _Held(threading.local):
    """Per thread: the autocommit engines' connections it keeps and when each was last used."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.connections: weakref.WeakKeyDictionary[Engine, tuple[Connection, float]] = (
            weakref.WeakKeyDictionary()
        )


_held = _Held()


def held_connection(engine: Engine) -> Connection:
    """The connection of autocommit `engine` this thread keeps between one-query sends
    (`committed_at_once`, `executed_alone`): a pool checkout and check-in per query cost
    more of a worker's CPU than the statement.

    Invariants: never shared between threads or inherited across a fork; each use is one
    autocommit query, so between uses it holds no transaction and no lock. Replaced when
    invalidated (a broken connection: `_send` invalidates it, the caller's retry gets a
    new one); pinged after IDLE_PING_SECONDS unused, as a pooled one is at checkout."""
    if _held.pid != os.getpid():
        _held.__init__()  # type: ignore[misc]  # a forked child: the parent's are not ours
    now = time.monotonic()
    kept = _held.connections.get(engine)
    if kept is not None:
        connection, used = kept
        if connection.invalidated or connection.closed:
            connection.close()
        elif now - used < IDLE_PING_SECONDS or _alive(connection):
            if connection.in_transaction():  # SQLAlchemy's own, begun by exec_driver_sql
                connection.rollback()  # in autocommit: nothing sent
            _held.connections[engine] = (connection, now)
            return connection
    connection = engine.connect()
    _held.connections[engine] = (connection, now)
    return connection


def _alive(connection: Connection) -> bool:
    """Whether a held connection that sat idle still answers (else it is invalidated)."""
    try:
        _ping(connection.connection.dbapi_connection)
    except DisconnectionError as exc:
        connection.invalidate(exc)
        connection.close()
        return False
    return True


def release_held_connection(engine: Engine) -> None:
    """Give back the connection this thread keeps for `engine` (at its disposal)."""
    kept = _held.connections.pop(engine, None) if _held.pid == os.getpid() else None
    if kept is not None and not kept[0].closed:
        kept[0].invalidate()  # closed now: the pool it came from is gone
        kept[0].close()


def _send(
    connection: Connection, statements: Sequence[Sent], begin: bool = True, commit: bool = False
) -> list[Any]:
    """[BEGIN,] `statements` [and COMMIT] in one simple-protocol query on `connection`'s
    psycopg connection (each statement's parameters bound client-side by psycopg); each
    statement's rows (named tuples). psycopg's errors come back as SQLAlchemy's, after a
    ROLLBACK.

    A prepared statement missing on the server (behind a pooler in transaction mode,
    queries of one client connection reach different server connections) turns
    preparing off for this process and the query is sent again with its statements
    inline, once."""
    import psycopg
    from psycopg.rows import namedtuple_row

    raw = cast(psycopg.Connection[Any], connection.connection.dbapi_connection)
    query = "BEGIN"

    def composed(cursor: Any) -> str:
        texts = [_bound(cursor, connection, s) for s in statements]
        return "; ".join([*(["BEGIN"] if begin else []), *texts, *(["COMMIT"] * commit)])

    try:
        with psycopg.ClientCursor(raw, row_factory=namedtuple_row) as cursor:
            query = composed(cursor)
            try:
                cursor.execute(query)
            except psycopg.errors.InvalidSqlStatementName:
                cursor.execute("ROLLBACK")
                _stop_preparing(connection)
                query = composed(cursor)
                cursor.execute(query)
            results = []
            for i in range(len(statements)):
                if i or begin:
                    cursor.nextset()
                results.append(list(cursor.fetchall()) if _has_rows(cursor) else [])
            return results
    except psycopg.Error as exc:
        broken = isinstance(exc, psycopg.OperationalError) or raw.closed
        if broken:
            connection.invalidate(exc)
            raise OperationalError(query, None, exc) from exc
        connection.exec_driver_sql("ROLLBACK")
        raise DBAPIError(query, None, exc) from exc


def _has_rows(cursor: Any) -> bool:
    """Whether the cursor's current result has rows to fetch (a SELECT, a RETURNING), read
    off its result status: `cursor.description` builds a column object per column."""
    from psycopg import pq

    result = cursor.pgresult
    return result is not None and result.status == pq.ExecStatus.TUPLES_OK


_preparing = True
"""Whether statements are prepared (off for good once one was missing on the server)."""


def _stop_preparing(connection: Connection) -> None:
    global _preparing
    if _preparing:
        log.warning(
            "a prepared statement was missing on the database server (a pooler in "
            "transaction mode?): statements are sent unprepared from now on"
        )
    _preparing = False
    connection.connection.info.pop("sluice_prepared", None)


def _bound(cursor: Any, connection: Connection, statement: Sent) -> str:
    """`statement` as SQL text for a multi-statement query: plain text as is; a
    `HotStatement` as `EXECUTE` of its server-side prepared statement (`_bound_named`).
    A SQLAlchemy statement is refused: it runs in a session (`executed`)."""
    if isinstance(statement, str):
        return statement
    stmt, values = statement
    if not isinstance(stmt, HotStatement):
        raise TypeError(
            "a statement sent in one query is a named statement of scheduler/core/sql/ "
            "(a HotStatement); run a SQLAlchemy statement in a session"
        )
    return _bound_named(cursor, connection, stmt.named, values)


def _bound_named(
    cursor: Any, connection: Connection, named: Named, values: Mapping[str, Any]
) -> str:
    """A statement of the `.sql` files as `EXECUTE` of its prepared statement, its values
    bound client-side by psycopg (inline when preparing is off)."""
    if not _preparing:
        return str(cursor.mogrify(named.pyformat, values))
    _ensure_prepared(cursor, connection, named.server_name, named.prepared)
    args = named.arguments(values)
    if not args:
        return f"EXECUTE {named.server_name}"
    placeholders = ", ".join(["%s"] * len(args))
    return str(cursor.mogrify(f"EXECUTE {named.server_name}({placeholders})", args))


PREPARED_PER_CONNECTION = 64
"""Most statements prepared on one connection; the least recently used is deallocated
(the named statements of scheduler/core/sql/ are fewer: none leaves in practice)."""


class PreparedNames(LRUCache[str, None]):
    """The names of the statements prepared on one psycopg connection, at most
    PREPARED_PER_CONNECTION: the least recently used one leaves first, and is deallocated
    on the server as it leaves (cachetools' `popitem`, which every eviction goes through)."""

    def __init__(self, raw: Any) -> None:
        super().__init__(maxsize=PREPARED_PER_CONNECTION)
        self._raw = raw

    def popitem(self) -> tuple[str, None]:
        name, value = super().popitem()
        self._raw.execute(f"DEALLOCATE {name}")
        return name, value


def _ensure_prepared(cursor: Any, connection: Connection, name: str, sql: str) -> None:
    """PREPARE `name` AS `sql` on this connection unless it is (its names kept in the
    pool's connection record, which is emptied when the connection is replaced)."""
    info = connection.connection.info
    known: PreparedNames | None = info.get("sluice_prepared")
    if known is None:
        known = info["sluice_prepared"] = PreparedNames(connection.connection.dbapi_connection)
    if name in known:
        known.get(name)  # a read marks it used
        return
    import psycopg

    # the same name is the same text (a pooler's server connection may have it already)
    with contextlib.suppress(psycopg.errors.DuplicatePreparedStatement):
        cursor.execute(f"PREPARE {name} AS {sql}")
    known[name] = None
