"""Assets: the data a task produces and a DAG may be scheduled on, as Airflow's.

`Asset(uri, name=None)` names a piece of data by its URI. A task lists what it produces
(`@task(outlets=[asset])`): each success of the task records one asset event per outlet,
in the result's transaction, with an `extra` dict the task may set through
`context["outlet_events"][asset]["extra"]`. A DAG scheduled on assets
(`DAG(schedule=asset)`, `schedule=[a, b]`, `schedule=(a | b) & c`) gets a run once its
condition holds over the assets with an event it has not consumed yet; that run consumes
them all (`context["triggering_asset_events"]`).

A condition is stored as JSON: `{"uri": U}`, `{"all": [...]}` or `{"any": [...]}`
(`condition_json`), and evaluated over a set of URIs (`holds`), by the schedulers.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from sluice.tasks.control_chars import first_control_char
from sluice.tasks.errors import DagDefinitionError

URI_MAX = 1000
"""Longest asset URI, in bytes of UTF-8 (it is a key of the tables' indexes)."""
NAME_MAX = 250
EXTRA_MAX_BYTES = 64 * 1024
"""Largest `extra` of one asset event, in bytes of compact JSON."""
CONDITION_MAX_ASSETS = 100
"""Most assets one DAG's schedule may name."""


def check_uri(uri: object) -> str:
    """`uri` if it may name an asset: UTF-8 text of 1 to URI_MAX bytes, no whitespace at
    its ends, no control character; ValueError (one line) otherwise."""
    if not isinstance(uri, str):
        raise ValueError(f"an asset URI must be text, got {type(uri).__name__}")
    try:
        size = len(uri.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValueError("an asset URI must be valid UTF-8 text") from None
    if not 1 <= size <= URI_MAX:
        raise ValueError(f"an asset URI must be 1 to {URI_MAX} bytes, got {size}")
    if uri != uri.strip():
        raise ValueError("an asset URI must not start or end with spaces")
    bad = first_control_char(uri)
    if bad is not None:
        raise ValueError(f"an asset URI must not contain control characters (U+{ord(bad):04X})")
    return uri


class _Condition:
    """What `|` and `&` build on assets."""

    def __or__(self, other: object) -> AssetAny:
        return AssetAny(self, _as_condition(other))

    def __and__(self, other: object) -> AssetAll:
        return AssetAll(self, _as_condition(other))

    def uris(self) -> Iterator[str]:
        raise NotImplementedError

    def json(self) -> dict[str, Any]:
        raise NotImplementedError


@dataclass(frozen=True, eq=True)
class Asset(_Condition):
    """A piece of data named by `uri` (and an optional display `name`)."""

    uri: str
    name: str | None = None

    def __post_init__(self) -> None:
        try:
            check_uri(self.uri)
        except ValueError as exc:
            raise DagDefinitionError(str(exc)) from None
        if self.name is not None and (
            not isinstance(self.name, str) or not 0 < len(self.name) <= NAME_MAX
        ):
            raise DagDefinitionError(f"an asset's name must be 1 to {NAME_MAX} characters")

    def __hash__(self) -> int:
        return hash(self.uri)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Asset) and other.uri == self.uri

    def uris(self) -> Iterator[str]:
        yield self.uri

    def json(self) -> dict[str, Any]:
        return {"uri": self.uri}


class _Group(_Condition):
    key = ""

    def __init__(self, *parts: _Condition) -> None:
        self.parts = tuple(_as_condition(p) for p in parts)
        if not self.parts:
            raise DagDefinitionError(f"an asset condition ({self.key}) needs at least one asset")

    def uris(self) -> Iterator[str]:
        for part in self.parts:
            yield from part.uris()

    def json(self) -> dict[str, Any]:
        return {self.key: [part.json() for part in self.parts]}

    def __repr__(self) -> str:
        return f"{type(self).__name__}{self.parts!r}"


class AssetAll(_Group):
    """Every part has a new event (`a & b`, or a list `[a, b]`)."""

    key = "all"


class AssetAny(_Group):
    """Any part has a new event (`a | b`)."""

    key = "any"


def _as_condition(value: object) -> _Condition:
    if isinstance(value, _Condition):
        return value
    if isinstance(value, list | tuple):
        return AssetAll(*value)
    raise DagDefinitionError(f"an asset condition combines sluice.Asset, got {value!r}")


def is_asset_schedule(schedule: object) -> bool:
    """Whether `schedule` (as given to `DAG`) is on assets: an asset, a condition, or a
    non-empty list of them."""
    if isinstance(schedule, _Condition):
        return True
    return (
        isinstance(schedule, list | tuple)
        and bool(schedule)
        and all(isinstance(p, _Condition) for p in schedule)
    )


def condition_json(schedule: object) -> dict[str, Any]:
    """The stored form of an asset schedule (a list is `all` of its items); at most
    CONDITION_MAX_ASSETS assets."""
    condition = _as_condition(schedule)
    if len(set(condition.uris())) > CONDITION_MAX_ASSETS:
        raise DagDefinitionError(f"a schedule may name at most {CONDITION_MAX_ASSETS} assets")
    return condition.json()


def condition_uris(condition: Mapping[str, Any]) -> set[str]:
    """Every URI a stored condition names."""
    if "uri" in condition:
        return {str(condition["uri"])}
    parts = condition.get("all") or condition.get("any") or []
    return set().union(*(condition_uris(p) for p in parts)) if parts else set()


def holds(condition: Mapping[str, Any], fresh: Iterable[str]) -> bool:
    """Whether a stored condition holds when the assets `fresh` have a new event."""
    have = set(fresh)

    def check(node: Mapping[str, Any]) -> bool:
        if "uri" in node:
            return node["uri"] in have
        if "all" in node:
            return all(check(p) for p in node["all"])
        return any(check(p) for p in node.get("any") or ())

    return check(condition)


def condition_text(condition: Mapping[str, Any]) -> str:
    """A stored condition as a person writes it: `(a | b) & c`."""
    if "uri" in condition:
        return str(condition["uri"])
    key, joiner = ("all", " & ") if "all" in condition else ("any", " | ")
    parts = [condition_text(p) for p in condition[key]]
    text = joiner.join(f"({p})" if (" & " in p or " | " in p) else p for p in parts)
    return text


def check_outlets(task_id: str, outlets: object) -> tuple[Asset, ...]:
    """A task's `outlets` option: a list of assets (one asset alone is accepted)."""
    if outlets is None:
        return ()
    items = [outlets] if isinstance(outlets, Asset) else outlets
    if not isinstance(items, list | tuple) or not all(isinstance(i, Asset) for i in items):
        raise DagDefinitionError(f"task '{task_id}': outlets must be a list of sluice.Asset")
    unique: dict[str, Asset] = {}
    for item in items:
        unique.setdefault(item.uri, item)
    return tuple(unique.values())


class OutletEvents(dict[str, dict[str, Any]]):
    """`context["outlet_events"]`: the task's outlets, each `{"extra": {...}}`, looked up
    by the `Asset` or by its URI. An asset the task does not list is a KeyError."""

    def __init__(self, uris: Iterable[str]) -> None:
        super().__init__({uri: {"extra": {}} for uri in uris})

    def __getitem__(self, key: object) -> dict[str, Any]:
        uri = key.uri if isinstance(key, Asset) else key
        try:
            return super().__getitem__(uri)  # type: ignore[index]
        except KeyError:
            raise KeyError(f"{uri!r} is not an outlet of this task") from None

    def __contains__(self, key: object) -> bool:
        return super().__contains__(key.uri if isinstance(key, Asset) else key)


def check_extras(outlets: Mapping[str, Mapping[str, Any]]) -> None:
    """ValueError (one line) unless each outlet's `extra` is a JSON object of at most
    EXTRA_MAX_BYTES: a task that set a bad one fails, and no event is written."""
    for uri, event in outlets.items():
        extra = event.get("extra")
        if not isinstance(extra, dict):
            raise ValueError(f"outlet_events[{uri!r}]['extra'] must be a dict")
        try:
            text = json.dumps(extra, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"outlet_events[{uri!r}]['extra'] is not JSON: {exc}") from None
        if len(text.encode("utf-8")) > EXTRA_MAX_BYTES:
            raise ValueError(
                f"outlet_events[{uri!r}]['extra'] is over {EXTRA_MAX_BYTES} bytes of JSON"
            )
