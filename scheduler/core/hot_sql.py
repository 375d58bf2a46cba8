"""The registry of the statements built with SQLAlchemy, once: the SQLite twins of the
named statements of scheduler/core/sql/ (`twin=True`), which PostgreSQL runs instead,
and the statements a scheduler's pass builds from registered parts.

Several caches key a statement, or a part of one (a condition, the columns a write
returns), by its identity: the queueing writes (`transitions`), the claims of runs and
TIs (`queries`). A statement made afresh at each call would miss those caches every
time (and grow them). So every such part is
registered once, under a name, where it is defined (`hot`), and the caches refuse a part
that is not (`check_registered`); what a cached builder makes from registered parts is
registered too (`built`).

On PostgreSQL the hot statements run as the named statements of scheduler/core/sql/
say (`scheduler.core.named_sql`): those files are the source, read as SQL, each with the
note of why it is shaped so. What is registered here is what SQLite runs instead (the
twins) and the statements a scheduler's pass builds per job or per kind of move.

Invariant: a registered element is kept alive by the registry, so its identity is never
reused by another object.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")


class UnregisteredStatement(LookupError):
    """A statement part given to an identity-keyed cache without being registered."""


@dataclass(frozen=True)
class Hot:
    """One registered statement or statement part."""

    name: str
    element: Any
    note: str
    built: bool
    """Made by a cached builder from registered parts (not written by hand)."""
    twin: bool = False
    """The SQLite twin of a statement of the `.sql` files (or a part of one): on
    PostgreSQL the file's text runs instead (`scheduler.core.named_sql`)."""


_BY_ID: dict[int, Hot] = {}
_BY_NAME: dict[str, Hot] = {}


def hot(name: str, element: T, note: str = "", *, twin: bool = False) -> T:
    """Register `element` (a statement, a condition or a tuple of columns, built once at
    module level) as `name` (`twin`: a SQLite twin's); returns it."""
    _register(Hot(name, element, note, built=False, twin=twin))
    return element


def built(name: str, element: T, *, twin: bool = False) -> T:
    """Register what a cached builder made (`name` says from what); returns it."""
    _register(Hot(name, element, "", built=True, twin=twin))
    return element


def _register(record: Hot) -> None:
    known = _BY_NAME.get(record.name)
    if known is not None and known.element is not record.element:
        if not record.built:
            raise ValueError(f"two hot statements are named {record.name!r}")
        del _BY_ID[id(known.element)]  # rebuilt after its cache evicted it: the new one
    _BY_ID[id(record.element)] = record
    _BY_NAME[record.name] = record


def is_registered(element: Any) -> bool:
    known = _BY_ID.get(id(element))
    return known is not None and known.element is element


def check_registered(element: Any, use: str) -> None:
    """Refuse an unregistered `element` given to the identity-keyed cache `use` (the
    empty tuple of columns needs no registering)."""
    if element == () or is_registered(element):
        return
    raise UnregisteredStatement(
        f"{use} caches by identity: register this statement part once, at module level, "
        f"with sluice.scheduler.core.hot_sql.hot(): {str(element)[:200]}"
    )


def name_of(element: Any) -> str:
    known = _BY_ID.get(id(element))
    return known.name if known is not None and known.element is element else "unregistered"


def registered() -> list[Hot]:
    """Every registered statement and part, by name."""
    return sorted(_BY_NAME.values(), key=lambda h: h.name)
