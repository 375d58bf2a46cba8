"""Dynamic task mapping: what ``task.partial(...).expand(...)`` and ``expand_kwargs``
record, how many indexes a mapped task gets, and what index ``i`` is called with.

A mapped task has a ``MapSpec``. Mode ``product`` (``expand``): the cross product of
the named arguments' items, in the order the arguments were given, the last varying
fastest (``itertools.product``), as in Airflow. Mode ``kwargs`` (``expand_kwargs``): one
dict of arguments per item. A source is a literal list, tuple or dict (a dict gives its
``(key, value)`` items) or an upstream's output (``Upstream``). An upstream that is itself
mapped gives the list of its indexes' results in map-index order; the one exception is
``per_index``: a task expanded over one mapped task's output alone maps one to one, its
index ``i`` called with that task's index ``i`` result.

The same functions read the serialized form (a reference is ``{"$upstream": id}``), so
the scheduler counts indexes from the JSON it stores and the worker builds the call
from the DAG file's objects: both count the same items.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sluice.tasks.arguments import MARKER_KEY, referenced

DEFAULT_MAX_MAP_LENGTH = 10_000
"""A task's max_map_length when it sets none (the deployment's cap may be lower)."""

PRODUCT = "product"
KWARGS = "kwargs"


class MapInputError(ValueError):
    """A mapped task's input is not something it can be expanded over (one line)."""


@dataclass(frozen=True)
class MapSpec:
    """What ``expand``/``expand_kwargs`` recorded on a task."""

    mode: str
    args: tuple[tuple[str, Any], ...]
    """(argument name, source) in the order given; for ``kwargs`` one pair named ``*``.
    Empty for a task of a mapped task group that follows a task of the group without
    taking a mapped argument: it maps one to one (``per_index``) on that task alone."""


def reference_of(source: Any) -> str | None:
    """The task id a source refers to (an ``Upstream``, a template or a JSON marker)."""
    if isinstance(source, dict) and set(source) == {MARKER_KEY}:
        value = source[MARKER_KEY]
        return value if isinstance(value, str) else None
    return referenced(source)


def per_index_of(task: Mapping[str, Any]) -> str | None:
    """The mapped task a serialized task maps one to one (``per_index``), if any."""
    found = (task.get("map") or {}).get("per_index")
    return found if isinstance(found, str) else None


def items_of(value: Any, what: str) -> list[Any]:
    """The items a source gives: a list's or tuple's elements, a dict's (key, value)."""
    if isinstance(value, list | tuple):
        return list(value)
    if isinstance(value, dict):
        return [tuple(item) for item in value.items()]
    raise MapInputError(
        f"{what} is a {type(value).__name__}: a mapped task expands over a list or a dict"
    )


def check_kwargs_items(items: Sequence[Any], what: str) -> None:
    """MapInputError unless every item of an ``expand_kwargs`` source is a dict of
    argument names."""
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not all(isinstance(k, str) for k in item):
            raise MapInputError(
                f"{what}: item {i} is a {type(item).__name__}, expand_kwargs needs a dict "
                "of argument names for each item"
            )


def check_length(count: int, limit: int, what: str) -> None:
    if count > limit:
        raise MapInputError(f"{what} gives {count} items, more than max_map_length {limit}")


def map_length(
    mode: str, args: Sequence[Sequence[Any]], value_of: Callable[[str], Any], what: str
) -> int:
    """How many indexes a mapped task has, its sources' references read by `value_of`
    (an upstream's output: its value, or for a mapped upstream the list of its results)."""
    sizes = []
    for name, source in args:
        ref = reference_of(source)
        value = value_of(ref) if ref is not None else source
        items = items_of(
            value,
            f"{what}: the input of '{name}'"
            if ref is None
            else f"{what}: the output of '{ref}' (for '{name}')",
        )
        if mode == KWARGS:
            check_kwargs_items(items, f"{what}: the output of '{ref or 'the literal list'}'")
        sizes.append(len(items))
    return math.prod(sizes) if sizes else 0


def index_kwargs(
    spec: MapSpec, upstream: Mapping[str, Any], index: int, per_index: str | None = None
) -> dict[str, Any]:
    """The expanded arguments of index `index`. `upstream` holds each referenced
    upstream's output (for the `per_index` upstream: its index `index` result)."""
    if per_index is not None:
        if not spec.args:  # a mapped task group's follower: it takes no mapped argument
            return {}
        ((name, _source),) = spec.args
        return {name: upstream[per_index]}
    lists: list[list[Any]] = []
    for name, source in spec.args:
        ref = reference_of(source)
        lists.append(items_of(upstream[ref] if ref is not None else source, name))
    if spec.mode == KWARGS:
        item = lists[0][index]
        check_kwargs_items([item], "expand_kwargs")
        return dict(item)
    chosen: dict[str, Any] = {}
    for (name, _source), items in zip(reversed(spec.args), reversed(lists), strict=True):
        index, at = divmod(index, len(items))
        chosen[name] = items[at]
    return {name: chosen[name] for name, _ in spec.args}


def map_json(spec: MapSpec, to_json: Callable[[Any], Any]) -> dict[str, Any]:
    """The serialized form: ``{"mode", "args": [[name, source], ...]}`` (a list, so the
    order survives a JSONB column)."""
    return {"mode": spec.mode, "args": [[name, to_json(src)] for name, src in spec.args]}


def check_map_output(value: Any, output: Mapping[str, Any], cap: int, task_id: str) -> None:
    """MapInputError unless `value`, the return value of `task_id`, can be expanded over
    by the mapped tasks that take it (`output`: its serialized ``map_output``): None (no
    items), a list or a dict, with ``kwargs`` dicts of arguments, at most the smaller of
    its consumer's max_map_length and the deployment's `cap` items."""
    if value is None:
        return
    consumer = output.get("consumer", "?")
    what = f"task '{task_id}' returned a value mapped task '{consumer}' expands over, but it"
    if not isinstance(value, list | tuple | dict):
        raise MapInputError(
            f"{what} is a {type(value).__name__}: a mapped task expands over a list or a dict"
        )
    items = list(value) if not isinstance(value, dict) else list(value.items())
    if output.get("kwargs"):
        check_kwargs_items(items, f"task '{task_id}' (input of expand_kwargs)")
    limit = min(int(output.get("limit") or DEFAULT_MAX_MAP_LENGTH), cap)
    if len(items) > limit:
        raise MapInputError(
            f"task '{task_id}' returned {len(items)} items, more than max_map_length "
            f"{limit} of mapped task '{consumer}'"
        )
