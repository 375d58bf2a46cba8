"""SQL-building helpers for the statements run on every task's path."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import ColumnElement, literal


def one_of(column: ColumnElement[Any], values: Iterable[Any]) -> ColumnElement[bool]:
    """`column IN (v1, v2, …)` with one plain bound parameter per value.

    `column.in_(list)` binds the list as one "expanding" parameter, which SQLAlchemy
    renders into the SQL text again at every execution; with fixed values (a set of
    states) this form is compiled once and reused whole from the statement cache.
    """
    found = sorted(set(values))
    if len(found) == 1:
        return column == literal(found[0])
    return column.in_([literal(value) for value in found])
