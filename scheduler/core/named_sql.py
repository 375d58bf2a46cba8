"""HotStatement SQL as the source: named, formatted PostgreSQL statements in `.sql` files.

A file of `scheduler/core/sql/` holds statements, each introduced by `-- name: <name>`,
then its note in `--` lines (why it is shaped so: the planner workarounds), then the
statement, with named parameters `:name` (`::type` is a cast, not a parameter; a list
value goes to `= ANY(:name)`). `statement(name)` gives the `Named` statement: the text
PostgreSQL prepares (`$1`, `$2`, ...), its parameters in that order, and the text with
psycopg's `%(name)s` placeholders for a statement sent unprepared.

On PostgreSQL a `HotStatement` statement runs as its file says (`scheduler.core.db` prepares it
on the server, values bound by psycopg: no SQLAlchemy compilation on the way); on SQLite
it runs as its twin, a SQLAlchemy Core statement made from the same values.

Invariants: the files are read once per process, at the first `statement()`; a name is
unique across the files; a statement's server-side name is made from its text, so the
same name is the same text in every process.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

from sqlalchemy import Executable

_NAME = re.compile(r"^-- name: ([a-z][a-z0-9_]*)\s*$", re.MULTILINE)
_TOKENS = re.compile(r"'(?:[^']|'')*'|--[^\n]*|::|:([A-Za-z_]\w*)|%")
"""String literals and comments (skipped), casts, parameters, and `%` (doubled for
psycopg's placeholders)."""


class UnknownStatement(LookupError):
    """A statement name no `.sql` file defines."""


@dataclass(frozen=True)
class Named:
    """One statement of a `.sql` file."""

    name: str
    note: str
    """Its `--` lines after the name, joined: why it is shaped so."""
    sql: str
    """As written, with `:name` parameters."""
    prepared: str
    """With `$1`, `$2`, ... for PREPARE."""
    order: tuple[str, ...]
    """The parameter names, in `$n` order."""
    pyformat: str
    """With `%(name)s` placeholders (and `%%`), for psycopg's client-side binding."""
    server_name: str
    """Its prepared statement's name on a server connection (from its text)."""

    def arguments(self, values: Mapping[str, Any]) -> list[Any]:
        """The values of its parameters, in `$n` order (KeyError names a missing one)."""
        return [values[name] for name in self.order]


Twin = Callable[[Mapping[str, Any]], tuple[Executable, Mapping[str, Any]]]
"""A statement's SQLite twin: the SQLAlchemy Core statement (built once) and its
parameters, from the values the PostgreSQL statement takes."""


@dataclass(frozen=True)
class HotStatement:
    """A hot statement: `Named` on PostgreSQL, its `twin` on SQLite (None: PostgreSQL
    only, the caller sends SQLite other statements)."""

    named: Named
    twin: Twin | None

    @property
    def name(self) -> str:
        return self.named.name

    def on_sqlite(self, values: Mapping[str, Any]) -> tuple[Executable, Mapping[str, Any]]:
        """Its twin's statement and parameters for `values`."""
        if self.twin is None:
            raise NotImplementedError(f"{self.name} runs on PostgreSQL only")
        return self.twin(values)


def same_values(statement: Executable) -> Twin:
    """The twin that runs `statement` (built once) with the values as they are: its
    parameters are named as the `.sql` file's."""
    return lambda values: (statement, values)


def hot_statement(name: str, twin: Twin | None) -> HotStatement:
    """The statement `name` of the `.sql` files, run as `twin` on SQLite (None: on
    PostgreSQL only)."""
    return HotStatement(statement(name), twin)


def statement(name: str) -> Named:
    found = _statements().get(name)
    if found is None:
        raise UnknownStatement(f"no statement named {name!r} in scheduler/core/sql/*.sql")
    return found


def every_statement() -> dict[str, Named]:
    """Every named statement of the `.sql` files, by name."""
    return dict(_statements())


@functools.cache
def _statements() -> dict[str, Named]:
    found: dict[str, Named] = {}
    folder = resources.files("sluice.scheduler.core") / "sql"
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".sql"):
            continue
        for named in parse(entry.read_text(encoding="utf-8"), entry.name):
            if named.name in found:
                raise ValueError(f"two statements are named {named.name!r} ({entry.name})")
            found[named.name] = named
    return found


def parse(text: str, source: str = "<sql>") -> list[Named]:
    """The named statements of one file's `text` (anything before the first name is
    the file's own comment)."""
    marks = list(_NAME.finditer(text))
    made = []
    for i, mark in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        made.append(_named(mark[1], text[mark.end() : end], source))
    return made


def _named(name: str, body: str, source: str) -> Named:
    lines = body.strip("\n").splitlines()
    note_lines = []
    while lines and lines[0].startswith("--"):
        note_lines.append(lines.pop(0)[2:].strip())
    sql = "\n".join(lines).strip().rstrip(";").strip()
    if not sql:
        raise ValueError(f"statement {name!r} of {source} is empty")
    order: list[str] = []

    def numbered(match: re.Match[str]) -> str:
        if match[1] is None:
            return match[0]
        if match[1] not in order:
            order.append(match[1])
        return f"${order.index(match[1]) + 1}"

    def placeholder(match: re.Match[str]) -> str:
        if match[1] is not None:
            return f"%({match[1]})s"
        return match[0].replace("%", "%%")  # in a literal or a comment too

    prepared = _TOKENS.sub(numbered, sql)
    server_name = "sluice_" + hashlib.sha1(prepared.encode("utf-8")).hexdigest()[:20]
    return Named(
        name=name,
        note=" ".join(note_lines),
        sql=sql,
        prepared=prepared,
        order=tuple(order),
        pyformat=_TOKENS.sub(placeholder, sql),
        server_name=server_name,
    )
