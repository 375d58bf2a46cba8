"""SQL-building helpers for the statements run on every task's path."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import ColumnElement, literal, literal_column


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


def unindexed(column: ColumnElement[Any]) -> ColumnElement[Any]:
    """`column || ''`: the column's value through an expression no index covers, for the
    checks of a statement that names its rows by their key (see `expected_state`)."""
    return column.op("||")(literal_column("''"))


def expected_state(column: ColumnElement[Any], values: Iterable[Any]) -> ColumnElement[bool]:
    """The expected-state check of a compare-and-set on rows named by their key (`one_of`
    on `column || ''`): an expression no index covers, so the planner reaches the rows by
    their key whatever its statistics say. A plan made while the table was small (a
    prepared statement keeps it until the next ANALYZE) otherwise picks an index on the
    state and reads every row in that state to change one."""
    return one_of(unindexed(column), values)


def is_scheduled(column: ColumnElement[Any]) -> ColumnElement[bool]:
    """`column = 'scheduled'` with the state written inline, for the checks of TIs that
    wait in a pool. The partial index `ix_task_instance_waiting` (state = 'scheduled')
    serves them only so: a prepared statement's generic plan cannot use a partial index
    whose condition depends on a parameter, and with the state as a parameter it
    estimates a third of the table in it, so an EXISTS or a LIMIT looks cheap to answer
    from a sequential scan, which on a table of a million finished TIs and none waiting
    reads all of them at every task's result."""
    return column == literal_column("'scheduled'")
