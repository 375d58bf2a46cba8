"""The `.sql` files' loader: names, notes, parameters in `$n` order, casts and literals
left alone (scheduler/core/named_sql.py)."""

from __future__ import annotations

import pytest

from sluice.scheduler.core.named_sql import UnknownStatement, every_statement, parse, statement

FILE = """-- the file's own comment, before any name

-- name: first
-- Why it is shaped so,
-- on two lines.
SELECT a FROM t
WHERE b = :b AND c = ANY(:cs::varchar[]) AND d LIKE '%:not_a_param%' -- :nor_this
  AND e = :b;

-- name: second
UPDATE t SET a = 1;
"""


def test_a_file_s_statements_are_named_with_their_note_and_parameters() -> None:
    first, second = parse(FILE)
    assert (first.name, second.name) == ("first", "second")
    assert first.note == "Why it is shaped so, on two lines."
    assert first.order == ("b", "cs")
    assert "b = $1 AND c = ANY($2::varchar[])" in first.prepared
    assert "AND e = $1" in first.prepared
    assert "'%:not_a_param%'" in first.prepared and "-- :nor_this" in first.prepared
    assert "b = %(b)s AND c = ANY(%(cs)s::varchar[])" in first.pyformat
    assert "'%%:not_a_param%%'" in first.pyformat  # psycopg reads %% as a percent sign
    assert first.arguments({"cs": ["x"], "b": 1, "other": 2}) == [1, ["x"]]
    assert second.order == () and second.note == "" and not second.sql.endswith(";")


def test_the_server_side_name_follows_the_text() -> None:
    (a,) = parse("-- name: a\nSELECT 1")
    (b,) = parse("-- name: b\nSELECT 1")
    (c,) = parse("-- name: a\nSELECT 2")
    assert a.server_name == b.server_name != c.server_name


def test_a_missing_value_or_statement_is_named() -> None:
    (a,) = parse("-- name: a\nSELECT :x")
    with pytest.raises(KeyError, match="x"):
        a.arguments({})
    with pytest.raises(UnknownStatement, match="no_such"):
        statement("no_such")


def test_the_package_s_statements_each_say_why_they_are_shaped_so() -> None:
    found = every_statement()
    assert "claim_try" in found
    for named in found.values():
        assert named.note, f"{named.name} has no note above it"
        assert max(map(len, named.sql.splitlines())) <= 100, named.name  # formatted
