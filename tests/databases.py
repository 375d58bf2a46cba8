"""Migrated PostgreSQL databases for the tests: copied once, then emptied and reused.

`CREATE DATABASE … TEMPLATE` copies and syncs every file of the template, its catalogs
above all: about 0.3 s of PostgreSQL's CPU for each of the suite's ~500 databases, plus
the `DROP`. Each pytest process therefore keeps a pool (`DatabasePool`). A test takes a
database from it (a copy of this process's migrated template when the pool is empty) and,
when the test is done, the pool gives it back emptied, so that the next test finds what a
migration leaves and nothing of the test before:

- every session still on it is terminated, and the database is renamed, so a process
  the test left behind can never reach the next test's data (it would find no database);
- its schema is compared with the template's (a fingerprint of tables, columns, indexes,
  constraints, triggers, functions, types and settings); a database whose schema a test
  changed is dropped, not reused;
- the tables the test wrote are truncated (a new, empty file, as in a copy), the rows
  the migrations wrote are copied back byte for byte, and every sequence the test
  called starts again from 1;
- its planner statistics and activity counters are reset (`pg_statistic`,
  `pg_stat_reset()`), so counts and plans do not carry over.

Anything that fails along the way drops the database instead. Each database a test gets
has a new name and a new deployment id, as a copy had.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator

import psycopg
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.pool import NullPool

from tests.engines import forget

PG_ADMIN_URL = os.environ.get(
    "SLUICE_TEST_PG_ADMIN_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)

FINGERPRINT_SQL = """
SELECT md5(coalesce(string_agg(item, E'\\n' ORDER BY item), '')) FROM (
  SELECT format('rel %s.%s %s', n.nspname, c.relname, c.relkind) AS item
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
   WHERE n.nspname NOT IN ('pg_catalog', 'information_schema')
     AND n.nspname NOT LIKE 'pg\\_to%' AND n.nspname NOT LIKE 'pg\\_temp%'
  UNION ALL
  SELECT format('col %s %s %s %s %s', a.attrelid::regclass, a.attname,
                format_type(a.atttypid, a.atttypmod), a.attnotnull,
                pg_get_expr(d.adbin, d.adrelid))
    FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
    LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
   WHERE c.relnamespace = 'public'::regnamespace AND a.attnum > 0 AND NOT a.attisdropped
  UNION ALL
  SELECT 'idx ' || pg_get_indexdef(i.indexrelid)
    FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
   WHERE c.relnamespace = 'public'::regnamespace
  UNION ALL
  SELECT format('con %s %s %s', conrelid::regclass, conname, pg_get_constraintdef(oid))
    FROM pg_constraint WHERE connamespace = 'public'::regnamespace
  UNION ALL
  SELECT 'trg ' || pg_get_triggerdef(oid) FROM pg_trigger WHERE NOT tgisinternal
  UNION ALL
  SELECT format('fn %s %s', oid::regprocedure, md5(prosrc))
    FROM pg_proc WHERE pronamespace = 'public'::regnamespace
  UNION ALL
  SELECT format('type %s %s', t.typname, t.typtype) FROM pg_type t
   WHERE t.typnamespace = 'public'::regnamespace
  UNION ALL
  SELECT format('enum %s %s', enumtypid::regtype, enumlabel) FROM pg_enum
  UNION ALL
  SELECT format('ext %s %s', extname, extversion) FROM pg_extension
  UNION ALL
  SELECT format('set %s', setconfig) FROM pg_db_role_setting
   WHERE setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database())
  UNION ALL
  SELECT format('seq %s %s %s', seqrelid::regclass, seqstart, seqincrement) FROM pg_sequence
  UNION ALL
  SELECT 'lo ' || count(*) FROM pg_largeobject_metadata
  UNION ALL
  SELECT 'xact ' || gid FROM pg_prepared_xacts WHERE database = current_database()
) AS schema_items
"""
"""One md5 of everything a test could leave in a database besides rows."""

TABLES_SQL = """
SELECT format('%I', relname) FROM pg_class
 WHERE relnamespace = 'public'::regnamespace AND relkind IN ('r', 'p') ORDER BY relname
"""

WRITTEN_SQL = """
SELECT format('%%I', c.relname) FROM pg_class c
  LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
 WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p')
   AND (coalesce(s.n_tup_ins + s.n_tup_upd + s.n_tup_del, 0) > 0
        OR (pg_relation_size(c.oid) > 0 AND NOT format('%%I', c.relname) = ANY(%(seeded)s)))
 ORDER BY c.relname
"""
"""The tables a test wrote (its sessions have ended, so their counts are in): those it
inserted, updated or deleted rows of, and any besides the seeded ones with a page."""


def pg_database_url(name: str) -> str:
    """The URL of database `name` on the tests' PostgreSQL server."""
    return PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"


def _conninfo(name: str) -> str:
    return pg_database_url(name).replace("postgresql+psycopg://", "postgresql://", 1)


def drop_database(pg_admin: Engine, name: str) -> None:
    """Drop database `name`, closing whatever is still connected to it."""
    forget(pg_database_url(name))  # the test's pool of it (`tests.engines`)
    with pg_admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def _new_name() -> str:
    return f"sluice_t_{uuid.uuid4().hex[:10]}"


class Template:
    """This process's migrated database, which the pool copies; nothing stays connected
    to it (PostgreSQL copies a template only when no session is on it)."""

    def __init__(self, pg_admin: Engine) -> None:
        from sluice.scheduler.core.db import make_engine
        from sluice.scheduler.core.migrate import upgrade

        self.name = f"sluice_t_tpl_{uuid.uuid4().hex[:10]}"
        with pg_admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{self.name}"'))
        try:
            engine = make_engine(pg_database_url(self.name))
            try:
                upgrade(engine)
            finally:
                engine.dispose()
            with psycopg.connect(_conninfo(self.name), autocommit=True) as conn:
                self.fingerprint = _fingerprint(conn)
                tables = [row[0] for row in conn.execute(TABLES_SQL)]
                copied = {table: _copy_out(conn, table) for table in tables}
                self.rows = {table: data for table, data in copied.items() if data}
        except BaseException:
            drop_database(pg_admin, self.name)  # a failed migration is not kept
            raise


def _fingerprint(conn: psycopg.Connection) -> str:
    row = conn.execute(FINGERPRINT_SQL).fetchone()
    assert row is not None
    return str(row[0])


def _has_rows(conn: psycopg.Connection, table: str) -> bool:
    return conn.execute(f"SELECT EXISTS (SELECT FROM {table})").fetchone() == (True,)


def _copy_out(conn: psycopg.Connection, table: str) -> bytes:
    """The rows of `table` as COPY's binary format, or b"" when it has none."""
    if not _has_rows(conn, table):
        return b""
    data = bytearray()
    with conn.cursor().copy(f"COPY {table} TO STDOUT (FORMAT binary)") as copy:
        for chunk in copy:
            data += chunk
    return bytes(data)


class DatabasePool:
    """The migrated databases of one pytest process: taken by a test, emptied after it."""

    def __init__(self) -> None:
        self._template: Template | None = None
        self._free: list[str] = []

    @property
    def idle(self) -> tuple[str, ...]:
        """The names of the emptied databases waiting for a test."""
        return tuple(self._free)

    def take(self, pg_admin: Engine) -> Iterator[str]:
        """The URL of a migrated database of this test's own; emptied for the next test
        (or dropped) when resumed."""
        if self._template is None:
            self._template = Template(pg_admin)
        name = self._free.pop() if self._free else self._copy(pg_admin, self._template)
        try:
            engine = create_engine(pg_database_url(name), poolclass=NullPool)
            try:
                with engine.begin() as conn:
                    conn.execute(text("UPDATE deployment SET id = :id"), {"id": str(uuid.uuid4())})
            finally:
                engine.dispose()
        except BaseException:
            drop_database(pg_admin, name)
            raise
        try:
            yield pg_database_url(name)
        finally:
            self._give_back(pg_admin, name)

    @staticmethod
    def _copy(pg_admin: Engine, template: Template) -> str:
        name = _new_name()
        with pg_admin.connect() as conn:
            conn.execute(
                text(f'CREATE DATABASE "{name}" TEMPLATE "{template.name}" STRATEGY FILE_COPY')
            )
        return name

    def _give_back(self, pg_admin: Engine, name: str) -> None:
        forget(pg_database_url(name))
        if self._template is None:  # closed while the test held it
            drop_database(pg_admin, name)
            return
        renamed = _new_name()
        try:
            with pg_admin.connect() as conn:
                left = conn.execute(
                    text(
                        "SELECT bool_and(pg_terminate_backend(pid, 10000)) FROM pg_stat_activity"
                        " WHERE datname = :name"
                    ),
                    {"name": name},
                ).scalar()
                if left is False:
                    raise RuntimeError(f"a session on {name} did not end")
                conn.execute(text(f'ALTER DATABASE "{name}" RENAME TO "{renamed}"'))
        except Exception:
            drop_database(pg_admin, name)
            return
        try:
            _empty(renamed, self._template)
        except SchemaChanged:
            drop_database(pg_admin, renamed)
            return
        except BaseException:
            drop_database(pg_admin, renamed)
            raise
        self._free.append(renamed)

    def close(self) -> None:
        """Drop the pooled databases and the template (at the end of the pytest process)."""
        names = list(self._free)
        if self._template is not None:
            names.append(self._template.name)
        self._free.clear()
        self._template = None
        if not names:
            return
        engine = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
        try:
            for name in names:
                with contextlib.suppress(Exception):
                    drop_database(engine, name)
        finally:
            engine.dispose()


class SchemaChanged(Exception):
    """A test changed a database's schema: it is dropped, not reused."""


def _empty(name: str, template: Template) -> None:
    """Give database `name` the template's rows, and nothing else of what a test did.

    One transaction: truncate the tables the test wrote (`WRITTEN_SQL`; truncating all
    of them costs 0.12 s of CPU), copy the migrations' rows back into those left empty,
    start every sequence the test called again; then reset the statistics the planner
    and the tests read."""
    with psycopg.connect(_conninfo(name), autocommit=True) as conn:
        if _fingerprint(conn) != template.fingerprint:
            raise SchemaChanged(name)
        seeded = list(template.rows)
        written = [row[0] for row in conn.execute(WRITTEN_SQL, {"seeded": seeded})]
        with conn.transaction():
            if written:  # CASCADE: with the (empty) tables whose keys name them
                conn.execute(f"TRUNCATE {', '.join(written)} CASCADE")
            for table, data in template.rows.items():
                if _has_rows(conn, table):
                    continue
                with conn.cursor().copy(f"COPY {table} FROM STDIN (FORMAT binary)") as copy:
                    copy.write(data)
            conn.execute(  # owned by a truncated table or not, called since the copy
                "SELECT setval(format('%I.%I', schemaname, sequencename), start_value, false)"
                " FROM pg_sequences WHERE last_value IS NOT NULL"
            )
            conn.execute(
                "DELETE FROM pg_statistic WHERE starelid IN"
                " (SELECT oid FROM pg_class WHERE relnamespace = 'public'::regnamespace)"
            )
        conn.execute("SELECT pg_stat_reset()")


POOL = DatabasePool()
"""This pytest process's pool (`conftest.pytest_unconfigure` closes it)."""
