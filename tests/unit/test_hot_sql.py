"""The hot SQL, readable as SQL: every registered hot statement (and the hot-path
statements its builders make) rendered for PostgreSQL, compared with tests/sql/*.sql.

Each snapshot starts with the statement's note as `--` comments: why it is shaped so
(the planner workarounds). After a deliberate change, rewrite them with
`SLUICE_UPDATE_SQL=1 pytest tests/unit/test_hot_sql.py` and read the diff.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.dialects import postgresql

import sluice.broker.worker.runner
import sluice.scheduler.core.queries.runs
import sluice.scheduler.core.queries.tis
import sluice.scheduler.scheduling.dagrun
import sluice.scheduler.scheduling.fresh_runs
from sluice.scheduler.core.hot_sql import Hot, registered

SNAPSHOTS = Path(__file__).resolve().parents[1] / "sql"
NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
UPDATE = os.environ.get("SLUICE_UPDATE_SQL") == "1"

_ = (
    sluice.broker.worker.runner,
    sluice.scheduler.core.queries.runs,
    sluice.scheduler.scheduling.fresh_runs,
)  # they register theirs


def hot_path_builds() -> dict[str, Any]:
    """What the builders still make on a hot path that runs in a session on PostgreSQL
    (the scheduler's fresh runs), by the name they register it under. The worker's
    one-query statements are named statements of scheduler/core/sql/: their files are
    the source, prepared and explained by tests/integration/test_named_sql_explain.py."""
    sent = sluice.scheduler.scheduling.fresh_runs.roots_statement([1], ["root"], NOW)
    assert not isinstance(sent, str)
    names = {id(h.element): h.name for h in registered()}
    return {names[id(sent[0])]: sent[0]}


def snapshotted() -> dict[str, Hot]:
    """The hand-written hot statements and the hot-path builds, by name (not the SQLite
    twins of the statements in scheduler/core/sql/, whose files are the source)."""
    builds = hot_path_builds()
    return {
        h.name: h
        for h in registered()
        if not h.name.startswith("test:")
        and not h.twin  # its statement's text is in scheduler/core/sql/*.sql
        and (not h.built or h.name in builds)
    }


def file_name(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")[:120] + ".sql"


def render(hot: Hot) -> str:
    dialect = postgresql.dialect()
    element = hot.element
    if isinstance(element, tuple):  # the columns a write returns
        body = ",\n".join(str(column.compile(dialect=dialect)) for column in element)
    else:
        body = str(element.compile(dialect=dialect))
    note = "\n".join(f"-- {line}" for line in textwrap.wrap(hot.note, 88)) if hot.note else ""
    header = f"-- {hot.name}\n" + (f"{note}\n" if note else "")
    return header + body.rstrip() + "\n"


STATEMENTS = snapshotted()


@pytest.mark.parametrize("name", sorted(STATEMENTS))
def test_each_hot_statement_matches_its_snapshot(name: str) -> None:
    path = SNAPSHOTS / file_name(name)
    text = render(STATEMENTS[name])
    if UPDATE:
        SNAPSHOTS.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"no snapshot {path.name}: run with SLUICE_UPDATE_SQL=1"
    assert path.read_text() == text, (
        f"{name} changed; if meant, rewrite tests/sql with SLUICE_UPDATE_SQL=1 and read the diff"
    )


def test_every_snapshot_belongs_to_a_hot_statement() -> None:
    if UPDATE:
        for stale in set(SNAPSHOTS.glob("*.sql")) - {SNAPSHOTS / file_name(n) for n in STATEMENTS}:
            stale.unlink()
    files = {p.name for p in SNAPSHOTS.glob("*.sql")}
    assert files == {file_name(name) for name in STATEMENTS}


def test_the_hand_written_statements_each_say_why_they_are_shaped_so() -> None:
    """The statements the planner notes are about carry their note (the rest are plain)."""
    noted = {h.name for h in STATEMENTS.values() if h.note}
    for name in ("has room", "next waiting TI fits", "active usage by pool and DAG"):
        assert name in noted
