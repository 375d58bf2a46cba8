"""Every named statement of scheduler/core/sql/*.sql is valid SQL for the schema the
migrations make: PostgreSQL prepares and EXPLAINs it (a typo, a missing column or a
parameter of no inferable type fails here, not on a worker's path)."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from sluice.scheduler.core.named_sql import every_statement
from tests.conftest import migrated_database

STATEMENTS = every_statement()


@pytest.fixture(scope="module")
def connection(pg_admin) -> Iterator[psycopg.Connection]:
    for url in migrated_database(pg_admin):
        plain = url.replace("postgresql+psycopg://", "postgresql://")
        with psycopg.connect(plain, autocommit=True) as conn:
            yield conn


@pytest.mark.parametrize("name", sorted(STATEMENTS))
def test_each_named_statement_is_prepared_and_explained(
    connection: psycopg.Connection, name: str
) -> None:
    named = STATEMENTS[name]
    connection.execute(f"PREPARE {named.server_name} AS {named.prepared}")
    try:
        nulls = ", ".join(["NULL"] * len(named.order))
        arguments = f"({nulls})" if named.order else ""
        plan = connection.execute(f"EXPLAIN EXECUTE {named.server_name}{arguments}")
        assert plan.fetchall(), name
    finally:
        connection.execute(f"DEALLOCATE {named.server_name}")
