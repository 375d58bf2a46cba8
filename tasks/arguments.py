"""References to upstream results inside a task's arguments, and resolving them.

``Upstream("extract")`` stands for the JSON value task ``extract`` returned; calling a task
in its DAG's ``with`` block returns one (``load(list_files())``). A CeleryTask's
``args``/``kwargs`` may hold them too, or a string that is exactly
``"{{ upstream.extract }}"``. Lists and dicts are walked. A worker resolves them against
the run's upstream results (``resolve``) just before it runs or sends the task.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from sluice.tasks.dag_context import current_dag
from sluice.tasks.errors import DagDefinitionError

_TEMPLATE = re.compile(r"^\{\{\s*upstream\.([A-Za-z0-9_.-]+)\s*\}\}$")
MARKER_KEY = "$upstream"


class Upstream:
    """Stands for the result of upstream task ``task_id`` in a task's arguments."""

    __slots__ = ("task_id",)

    def __init__(self, task_id: str) -> None:
        if not isinstance(task_id, str) or not task_id:
            raise DagDefinitionError(f"Upstream() needs a task id, got {task_id!r}")
        self.task_id = task_id

    def __repr__(self) -> str:
        return f"Upstream({self.task_id!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Upstream) and other.task_id == self.task_id

    def __hash__(self) -> int:
        return hash(("Upstream", self.task_id))

    # A task's result links as its task does (``start >> load.expand(path=files())``, as
    # Airflow's XComArg): the task is looked up in the DAG being defined.
    def __rshift__(self, other: Any) -> Any:
        return task_of(self) >> other

    def __lshift__(self, other: Any) -> Any:
        return task_of(self) << other

    def __rrshift__(self, other: Any) -> Any:
        return other >> task_of(self)

    def __rlshift__(self, other: Any) -> Any:
        return other << task_of(self)


def task_of(ref: Upstream) -> Any:
    """The task whose result `ref` stands for, in the DAG whose ``with`` block runs."""
    dag = current_dag()
    found = dag.tasks.get(ref.task_id) if dag is not None else None
    if found is None:
        where = f"DAG '{dag.dag_id}'" if dag is not None else "no DAG's with block"
        raise DagDefinitionError(f"{ref!r} links no task: '{ref.task_id}' is not in {where}")
    return found


def referenced(value: Any) -> str | None:
    """The task id `value` refers to, if it is a reference (not walking containers)."""
    if isinstance(value, Upstream):
        return value.task_id
    if isinstance(value, str):
        match = _TEMPLATE.match(value)
        return match.group(1) if match else None
    return None


def references(value: Any) -> Iterator[str]:
    """Every task id referred to anywhere in `value` (lists, tuples and dicts walked)."""
    ref = referenced(value)
    if ref is not None:
        yield ref
    elif isinstance(value, list | tuple):
        for item in value:
            yield from references(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from references(item)


def resolve(value: Any, upstream: Mapping[str, Any], task_id: str = "?") -> Any:
    """``value`` with every upstream reference replaced by that upstream's result."""
    ref = referenced(value)
    if ref is not None:
        if ref not in upstream:
            known = ", ".join(sorted(upstream)) or "none"
            raise LookupError(
                f"task '{task_id}' refers to upstream '{ref}', which is not one of its "
                f"upstream tasks ({known})"
            )
        return upstream[ref]
    if isinstance(value, list | tuple):
        return [resolve(v, upstream, task_id) for v in value]
    if isinstance(value, dict):
        return {k: resolve(v, upstream, task_id) for k, v in value.items()}
    return value


def to_json(value: Any, *, strict: bool = True) -> Any:
    """The JSON form of arguments: ``Upstream(x)`` becomes ``{"$upstream": x}``. With
    ``strict=False`` a value JSON has no form for becomes ``{"$repr": repr(value)}`` (a
    Python task's literal arguments: the worker uses the objects themselves, the
    serialized DAG only records them for its version)."""
    if isinstance(value, Upstream):
        return {MARKER_KEY: value.task_id}
    if isinstance(value, list | tuple):
        return [to_json(v, strict=strict) for v in value]
    if isinstance(value, dict):
        return {str(k): to_json(v, strict=strict) for k, v in value.items()}
    if strict or value is None or isinstance(value, str | int | float | bool):
        return value
    return {"$repr": repr(value)}
