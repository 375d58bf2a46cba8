"""The migrations build the schema the models describe: alembic's autogenerate finds
nothing to add, drop or alter on a freshly migrated database (PostgreSQL and SQLite)."""

from __future__ import annotations

from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from sluice.scheduler.core.db import make_engine
from sluice.scheduler.core.migrate import upgrade
from sluice.scheduler.core.models import Base


def differences(url: str) -> list[object]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return list(compare_metadata(MigrationContext.configure(conn), Base.metadata))
    finally:
        engine.dispose()


def test_postgresql_schema_is_the_models(pg_url: str) -> None:
    assert differences(pg_url) == []


EXPRESSION_INDEXES = {"ix_task_instance_waiting", "ix_task_instance_limited"}
"""Indexes with an expression (`priority_weight DESC`), which alembic cannot read back
from SQLite: it reports each as removed and added again."""


def test_sqlite_schema_is_the_models(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'sluice.db'}"
    engine = make_engine(url)
    upgrade(engine)
    engine.dispose()
    found = differences(url)
    readable = [
        d
        for d in found
        if not (
            isinstance(d, tuple)
            and d[0] in ("add_index", "remove_index")
            and d[1].name in EXPRESSION_INDEXES
        )
    ]
    assert readable == [] and len(found) - len(readable) <= 2 * len(EXPRESSION_INDEXES)
