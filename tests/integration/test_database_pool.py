"""The tests' pool of databases (`tests.databases`): a database given back is, for the
next test, what a migration leaves, and nothing the test before did reaches it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import psycopg
import pytest
from sqlalchemy import Engine

from tests.databases import DatabasePool

AUDIT_ROW = (
    "INSERT INTO audit_log (at, who, action, dag_id, run_id) VALUES (now(), 'a', 'b', 'd', 'r')"
)


def conninfo(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


def rows(url: str, sql: str) -> list[tuple[object, ...]]:
    with psycopg.connect(conninfo(url)) as conn:
        return conn.execute(sql).fetchall()


def exists(pg_admin: Engine, url: str) -> bool:
    name = url.rsplit("/", 1)[1]
    with pg_admin.connect() as conn:
        return bool(
            conn.exec_driver_sql(
                "SELECT count(*) FROM pg_database WHERE datname = %s", (name,)
            ).scalar_one()
        )


@pytest.fixture
def pool() -> Iterator[DatabasePool]:
    made = DatabasePool()
    yield made
    made.close()


def test_a_database_given_back_is_emptied_renamed_and_cut_from_its_last_test(
    pool: DatabasePool, pg_admin: Engine
) -> None:
    first = pool.take(pg_admin)
    url = next(first)
    template_rows = {
        table: rows(url, f"SELECT * FROM {table}") for table in ("pool", "alembic_version")
    }
    deployment = rows(url, "SELECT id FROM deployment")
    with psycopg.connect(conninfo(url), autocommit=True) as conn:
        conn.execute("INSERT INTO pool (name, slots) VALUES ('busy', 3)")
        conn.execute(AUDIT_ROW)
        # a row of a table that others' keys name (its truncation must take them along)
        conn.execute("INSERT INTO sluice_user (name, role, created_at) VALUES ('u', 'op', now())")
        conn.execute("ANALYZE pool")
        left_open = psycopg.connect(conninfo(url), autocommit=True)  # a process left behind
        with contextlib.suppress(StopIteration):
            next(first)

        second = pool.take(pg_admin)
        again = next(second)
        assert again != url and not exists(pg_admin, url)
        with pytest.raises(psycopg.OperationalError):
            left_open.execute("SELECT 1")
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(conninfo(url))
    assert {t: rows(again, f"SELECT * FROM {t}") for t in template_rows} == template_rows
    assert rows(again, "SELECT count(*) FROM audit_log") == [(0,)]
    assert rows(again, "SELECT count(*) FROM sluice_user") == [(0,)]
    assert rows(again, "SELECT id FROM deployment") != deployment
    with psycopg.connect(conninfo(again), autocommit=True) as conn:
        conn.execute(AUDIT_ROW)
    assert rows(again, "SELECT id FROM audit_log") == [(1,)]  # sequences start again
    planner = rows(again, "SELECT count(*) FROM pg_stats WHERE tablename = 'pool'")
    assert planner == [(0,)]
    with contextlib.suppress(StopIteration):
        next(second)


def test_a_database_whose_schema_a_test_changed_is_dropped(
    pool: DatabasePool, pg_admin: Engine
) -> None:
    first = pool.take(pg_admin)
    url = next(first)
    with psycopg.connect(conninfo(url), autocommit=True) as conn:
        conn.execute("ALTER TABLE pool ADD COLUMN altered_by_a_test int")
    with contextlib.suppress(StopIteration):
        next(first)
    second = pool.take(pg_admin)
    again = next(second)
    added = "SELECT count(*) FROM pg_attribute WHERE attname = 'altered_by_a_test'"
    assert rows(again, added) == [(0,)]
    with contextlib.suppress(StopIteration):
        next(second)
    assert not exists(pg_admin, url)
    assert len(pool.idle) == 1  # the copy made for the second test; the altered one is gone
