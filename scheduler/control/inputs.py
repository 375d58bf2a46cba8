"""Checking what users type (a date, a conf, an id, a number), once for the CLI and the API.

Each check raises `InputError` with one line meant for the user; the CLI prints it and
exits 2, the API answers 4xx with it. Everything that passes can be stored by either
database and read back (and answered as JSON) without an error: no text that is not
valid UTF-8, no NUL, no NaN or Infinity, no number or date out of its column's range.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Iterator
from typing import Any

from sluice.scheduler.core.settings import DEFAULTS
from sluice.tasks import assets, triggers


class InputError(ValueError):
    """Input that cannot be used; the message is one line for the user."""


ID_MAX = 250
"""Longest id or name a row holds (the columns are VARCHAR(250))."""

MAX_TRY = 1_000_000
MAX_MAP_INDEX = 10_000_000
"""Largest map index a user may name (above any max_map_length)."""
"""Highest try number anyone may ask for (far above any `retries`)."""

INT_MAX = 2**31 - 1
"""The largest INTEGER both databases store (PostgreSQL's int4)."""

_CONTROL = frozenset([*range(0x20), 0x7F])
"""C0 control characters and DEL: no id may hold one (invisible, or moves a terminal)."""


def storable(value: str) -> str:
    """`value` if the database can store it as text, else an InputError saying why."""
    if "\x00" in value:
        raise InputError("must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InputError("must be valid UTF-8 text") from None
    return value


def check_id_text(value: str) -> str:
    """`value` if an id may be made of these characters: not only dots (`.` and `..` are
    path segments a URL cannot name), no C0 control character nor DEL. The id's other
    rules (length, spaces, '/') are `scheduling.dagrun.check_run_id`'s."""
    if value and value.strip(".") == "":
        raise InputError("must not be made only of dots (it could not be named in a URL)")
    bad = next((c for c in value if ord(c) in _CONTROL), None)
    if bad == "\x00":
        raise InputError("must not contain NUL characters")
    if bad is not None:
        raise InputError(f"must not contain control characters (found U+{ord(bad):04X})")
    return value


def check_name(value: str, what: str) -> str:
    """A name a user gives a row (a pool): not empty, at most ID_MAX characters, storable,
    made of visible characters (as `check_id_text`)."""
    try:
        if not value.strip():
            raise InputError("must not be empty")
        storable(value)
        check_id_text(value)
        if len(value) > ID_MAX:
            raise InputError(f"must be at most {ID_MAX} characters, got {len(value)}")
    except InputError as exc:
        raise InputError(f"{what} {exc}") from None
    return value


def check_asset_uri(value: str) -> str:
    """`value` as an asset's URI (`sluice.Asset`): 1 to 1000 bytes, no control character
    nor spaces at its ends; InputError otherwise."""
    try:
        return storable(assets.check_uri(value))
    except InputError as exc:
        raise InputError(f"an asset URI {exc}") from None
    except ValueError as exc:
        raise InputError(str(exc)) from None


def check_event_key(value: str) -> str:
    """`value` as the key of an event (`Event(key)`): 1 to 250 characters, no control
    character, storable; InputError otherwise."""
    try:
        return storable(triggers.check_event_key(value))
    except InputError as exc:
        raise InputError(f"an event key {exc}") from None
    except ValueError as exc:
        raise InputError(str(exc)) from None


NOTE_MAX_CHARS = 500
"""Longest note of a run or a task instance."""


def check_note(text: str) -> str:
    """`text` as a note: stripped, 1 to NOTE_MAX_CHARS characters, no control character
    (newlines included: a note is one line), storable; InputError otherwise."""
    note = text.strip()
    if not note:
        raise InputError("a note cannot be empty")
    if len(note) > NOTE_MAX_CHARS:
        raise InputError(f"a note is at most {NOTE_MAX_CHARS} characters, got {len(note)}")
    bad = next((c for c in note if ord(c) in _CONTROL), None)
    if bad is not None:
        raise InputError(f"a note is one line of text (found U+{ord(bad):04X})")
    try:
        storable(note)
    except InputError:
        raise InputError("a note must be valid text (no NUL, no lone surrogate)") from None
    return note


def check_int(value: int, what: str, low: int, high: int) -> int:
    """`value` if `low <= value <= high`, else an InputError naming the range."""
    if not low <= value <= high:
        raise InputError(f"{what} must be between {low} and {high}, got {value}")
    return value


def check_seconds(value: float, what: str) -> float:
    """A number of seconds to wait: finite (NaN and Infinity are refused)."""
    if not math.isfinite(value):
        raise InputError(f"{what} must be a finite number of seconds, got {value}")
    return value


def parse_date(text: str, what: str = "date") -> dt.datetime:
    """An ISO 8601 date or datetime; naive values are taken as UTC. A date whose UTC
    form falls outside years 1 to 9999 is out of range."""
    try:
        value = dt.datetime.fromisoformat(text)
    except ValueError:
        raise InputError(
            f"{what} {text!r} is not an ISO 8601 date (e.g. 2026-01-31T00:00:00Z)"
        ) from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    try:
        return value.astimezone(dt.UTC)
    except (OverflowError, ValueError):
        raise InputError(f"{what} {text!r} is out of range (years 1 to 9999 in UTC)") from None


# -- conf ---------------------------------------------------------------------------------


def _where(path: tuple[str | int, ...]) -> str:
    """`["a"][0]`, or `the top level`; at most about 80 characters."""
    text = "".join(f"[{p}]" if isinstance(p, int) else f"[{json.dumps(p)}]" for p in path)
    if not text:
        return "the top level"
    return text if len(text) <= 80 else text[:77] + "..."


def _walk(conf: dict[str, Any], max_depth: int) -> Iterator[tuple[tuple[str | int, ...], str, Any]]:
    """Every key (as `("key", text)`) and every value under `conf`, with its path;
    iterative, so that no nesting exhausts the stack. An object or list deeper than
    `max_depth` levels (`conf` is level 1) is yielded as `("too deep", value)` and not
    entered."""
    stack: list[tuple[tuple[str | int, ...], Any]] = [((), conf)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, dict | list | tuple) and len(path) >= max_depth:
            yield path, "too deep", value
        elif isinstance(value, dict):
            for key, item in value.items():
                yield path, "key", key
                stack.append(((*path, str(key)), item))
        elif isinstance(value, list | tuple):
            stack.extend(((*path, i), item) for i, item in enumerate(value))
        else:
            yield path, "value", value


def too_deep(what: str, limit: int, at: str | None = None) -> InputError:
    """The refusal of a conf nested deeper than `limit` levels (found at `at`, if known)."""
    where = f" (at {at})" if at is not None else ""
    return InputError(
        f"{what} is nested more than {limit} levels deep; at most {limit} are allowed "
        f"(SLUICE_MAX_CONF_DEPTH){where}"
    )


def check_conf(
    conf: Any,
    *,
    max_bytes: int | None = None,
    max_depth: int | None = None,
    what: str = "conf",
) -> dict[str, Any]:
    """`conf` if it is a JSON object that both databases store and give back as it was:
    at most `max_depth` levels deep (default: `Settings.max_conf_depth`), checked first
    and without recursion; text valid UTF-8 without NUL (keys and values), numbers finite,
    at most `max_bytes` (default: `Settings.max_conf_bytes`) as compact UTF-8 JSON."""
    limit = DEFAULTS.max_conf_bytes if max_bytes is None else max_bytes
    depth = DEFAULTS.max_conf_depth if max_depth is None else max_depth
    if not isinstance(conf, dict):
        raise InputError(f"{what} must be a JSON object, e.g. '{{\"key\": 1}}'")
    for path, kind, item in _walk(conf, depth):
        at = _where(path)
        if kind == "too deep":
            raise too_deep(what, depth, at)
        if kind == "key" and not isinstance(item, str):
            raise InputError(f"{what}: the keys of an object must be text (at {at})")
        if isinstance(item, str):
            place = f"a key at {at}" if kind == "key" else at
            if "\x00" in item:
                raise InputError(f"{what} must not contain NUL characters (at {place})")
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise InputError(
                    f"{what} must be valid UTF-8 text, not a lone surrogate (at {place})"
                ) from None
        elif isinstance(item, float) and not math.isfinite(item):
            raise InputError(f"{what} must not contain NaN or Infinity (at {at})")
        elif kind == "value" and not (item is None or isinstance(item, str | int | float)):
            raise InputError(f"{what}: {type(item).__name__} is not a JSON value (at {at})")
    try:
        size = len(json.dumps(conf, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
    except (RecursionError, ValueError):  # not reached: the walk refused deeper nesting
        raise too_deep(what, depth) from None
    if size > limit:
        raise InputError(
            f"{what} is {size} bytes of JSON; at most {limit} are allowed (SLUICE_MAX_CONF_BYTES)"
        )
    return conf


def parse_conf(
    text: str | None,
    *,
    max_bytes: int | None = None,
    max_depth: int | None = None,
    what: str = "--conf",
) -> dict[str, Any]:
    """The JSON object in `text` (`{}` for None), checked by `check_conf`. JSON nested too
    deeply for `json.loads` (RecursionError) is refused as any conf over `max_depth` is."""
    if text is None:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{what} is not valid JSON: {exc}") from None
    except RecursionError:
        raise too_deep(what, DEFAULTS.max_conf_depth if max_depth is None else max_depth) from None
    except ValueError as exc:  # an integer of over 4300 digits
        raise InputError(f"{what} cannot be read: {str(exc).splitlines()[0]}") from None
    if not isinstance(value, dict):
        raise InputError(f"{what} must be a JSON object, e.g. '{{\"key\": 1}}'")
    return check_conf(value, max_bytes=max_bytes, max_depth=max_depth, what=what)
