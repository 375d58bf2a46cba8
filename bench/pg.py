"""PostgreSQL helpers: a throw-away database per benchmark, and its commit counter."""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass

from sqlalchemy import Engine, create_engine, text
from sqlalchemy.pool import NullPool

ADMIN_URL = os.environ.get(
    "SLUICE_BENCH_PG_ADMIN_URL",
    os.environ.get(
        "SLUICE_TEST_PG_ADMIN_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
    ),
)
"""A superuser URL on the `postgres` database (CREATE/DROP DATABASE, pg_stat_database)."""


def new_run_tag() -> str:
    """A short random tag that keeps concurrent bench runs apart (db names, queues)."""
    return uuid.uuid4().hex[:8]


def admin_engine(url: str = ADMIN_URL) -> Engine:
    return create_engine(url, isolation_level="AUTOCOMMIT", poolclass=NullPool)


@dataclass
class BenchDb:
    """A database `sluice_bench_<tag>[_<suffix>]`, created on `create()`, dropped on `drop()`."""

    admin: Engine
    name: str

    @classmethod
    def create(cls, admin: Engine, tag: str, suffix: str = "") -> BenchDb:
        name = f"sluice_bench_{tag}" + (f"_{suffix}" if suffix else "")
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        return cls(admin, name)

    @property
    def url(self) -> str:
        base = self.admin.url.set(database=self.name)
        return base.render_as_string(hide_password=False)

    def drop(self) -> None:
        with self.admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)'))

    def xact_commit(self) -> int:
        """Committed transactions of this database so far (read from the admin database,
        so reading it adds nothing to the count)."""
        with self.admin.connect() as conn:
            value = conn.execute(
                text("SELECT xact_commit FROM pg_stat_database WHERE datname = :n"),
                {"n": self.name},
            ).scalar()
        return int(value or 0)


def server_version(admin: Engine) -> str:
    with admin.connect() as conn:
        return str(conn.execute(text("SHOW server_version")).scalar())


def analyze(engine: Engine) -> None:
    """VACUUM (ANALYZE) the database, as autovacuum does after a table grew (statistics
    for the planner, the visibility map), then CHECKPOINT: a deployment's history was
    written out long ago, and else autovacuum and the checkpointer work on the loaded
    tables during the measurements and compete with them for the CPU."""
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM (ANALYZE)"))
        conn.execute(text("CHECKPOINT"))
