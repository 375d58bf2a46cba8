"""Dialect-aware INSERT … ON CONFLICT for PostgreSQL and SQLite."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import DeclarativeBase, Session


def upsert(
    session: Session,
    model: type[DeclarativeBase],
    values: Mapping[str, Any],
    *,
    keys: Sequence[str],
    update: Sequence[str],
) -> None:
    """Insert `values`, or update the columns `update` of the row with the same `keys`."""
    dialect = session.get_bind().dialect.name
    module: Any = postgresql if dialect == "postgresql" else sqlite
    stmt = module.insert(model).values(**values)
    if update:
        stmt = stmt.on_conflict_do_update(
            index_elements=list(keys), set_={c: stmt.excluded[c] for c in update}
        )
    else:
        stmt = stmt.on_conflict_do_nothing(index_elements=list(keys))
    session.execute(stmt)
