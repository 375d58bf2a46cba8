"""The hot writes that name one task instance by its key reach it by its key in their
generic plan (the plan a prepared statement keeps), on a small table as on a big one.

PostgreSQL makes a prepared statement's generic plan once, from the statistics of that
moment; on a small table an index on another column of the WHERE ties with the primary
key, and the plan then reads every row under that index value to change one (the claim
read each TI of its DAG through ix_task_instance_dag_state). Each statement is prepared
here with `$n` parameters and explained under `plan_cache_mode = force_generic_plan`.
"""

from __future__ import annotations

import re

import pytest
from sqlalchemy import Connection, create_engine, text

from sluice.scheduler.core.named_sql import Named, every_statement


def one_ti_writes() -> dict[str, Named]:
    """The named statements (scheduler/core/sql/) that change one TI by its id (the
    `write_success_reading_*` statements write as `write_success` does, in a WITH)."""
    return {
        name: named
        for name, named in every_statement().items()
        if named.sql.startswith("UPDATE task_instance") and re.search(r"\bid = :ti_id", named.sql)
    }


WRITES = one_ti_writes()


def generic_plan(conn: Connection, named: Named) -> str:
    conn.execute(text("SET plan_cache_mode = force_generic_plan"))
    conn.exec_driver_sql(f"PREPARE probe AS {named.prepared}")
    try:
        nulls = ", ".join(["NULL"] * len(named.order))
        rows = conn.exec_driver_sql(f"EXPLAIN EXECUTE probe({nulls})").all()
    finally:
        conn.exec_driver_sql("DEALLOCATE probe")
    return "\n".join(row[0] for row in rows)


def test_the_claim_and_the_result_are_among_the_writes_checked() -> None:
    assert "claim_try" in WRITES
    assert "write_success" in WRITES and "write_success_counting_the_run" in WRITES
    assert "queue_ti_if_room" in WRITES


@pytest.mark.parametrize("name", sorted(WRITES))
def test_a_write_of_one_ti_reaches_it_by_its_key(pg_url: str, name: str) -> None:
    engine = create_engine(pg_url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with engine.connect() as conn:
            plan = generic_plan(conn, WRITES[name])
    finally:
        engine.dispose()
    # the scan of the row to change: the only one on `task_instance` with no alias
    target = [
        line for line in plan.splitlines() if re.search(r"Scan .* on task_instance  \(", line)
    ]
    assert target and all("using pk_task_instance on" in line for line in target), plan
