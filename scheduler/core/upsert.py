"""Dialect-aware INSERT … ON CONFLICT for PostgreSQL and SQLite."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import DeclarativeBase, Session

M = TypeVar("M", bound=DeclarativeBase)


def _insert(session: Session, model: type[DeclarativeBase]) -> Any:
    dialect = session.get_bind().dialect.name
    module: Any = postgresql if dialect == "postgresql" else sqlite
    return module.insert(model)


def upsert(
    session: Session,
    model: type[DeclarativeBase],
    values: Mapping[str, Any],
    *,
    keys: Sequence[str],
    update: Sequence[str],
) -> None:
    """Insert `values`, or update the columns `update` of the row with the same `keys`."""
    stmt = _insert(session, model).values(**values)
    if update:
        stmt = stmt.on_conflict_do_update(
            index_elements=list(keys), set_={c: stmt.excluded[c] for c in update}
        )
    else:
        stmt = stmt.on_conflict_do_nothing(index_elements=list(keys))
    session.execute(stmt)


def insert_unless_clash(session: Session, model: type[M], values: Mapping[str, Any]) -> M | None:
    """Insert one row of `model` in one statement and return it, loaded into `session`;
    None if it clashes with a unique key (`ON CONFLICT DO NOTHING`: nothing is written,
    and the transaction stays usable, where a failed INSERT would abort it)."""
    stmt = _insert(session, model).on_conflict_do_nothing().returning(model)
    found: M | None = session.scalars(stmt, [dict(values)]).first()
    return found
