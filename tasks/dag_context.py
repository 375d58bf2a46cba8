"""The DAG whose ``with`` block runs, and what a task needs of the DAG it belongs to.

Below ``dag`` (a DAG enters and leaves its block here) and ``task`` (a task joins the
innermost DAG and reads its options): a task needs the DAG only as ``TaskOwner``, which
``dag.DAG`` is, so ``task`` never imports ``dag`` and ``dag`` imports ``task`` alone.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Protocol, TypeVar

DAG_ID_RE = re.compile(r"^(?!\.+\Z)[A-Za-z0-9_.-]{1,250}\Z")
"""A DAG or task id: 1-250 letters, digits, `_`, `.` or `-`, not only dots (`.` and `..`
cannot be named in a URL path)."""

T = TypeVar("T")


class TaskOwner(Protocol[T]):
    """The DAG as its tasks (of type T) see it: its id, its file, its default_args and
    its tasks by id, which a new task joins (`add_task`)."""

    dag_id: str
    fileloc: str
    default_args: dict[str, Any]

    @property
    def tasks(self) -> Mapping[str, T]: ...

    def add_task(self, task: T) -> None: ...


_context_stack: list[TaskOwner[Any]] = []
"""DAGs entered with ``with``, innermost last."""


def current_dag() -> TaskOwner[Any] | None:
    """The innermost DAG whose ``with`` block is running, or None."""
    return _context_stack[-1] if _context_stack else None


def enter(dag: TaskOwner[Any]) -> None:
    """`dag`'s ``with`` block starts: the tasks made now join it."""
    _context_stack.append(dag)


def leave(dag: TaskOwner[Any]) -> None:
    """`dag`'s ``with`` block ends (even out of order: a block left by an exception)."""
    if _context_stack and _context_stack[-1] is dag:
        _context_stack.pop()
    elif dag in _context_stack:
        _context_stack.remove(dag)


class GroupOwner(Protocol):
    """A task group as a task made inside its ``with`` block sees it (`task_group`):
    its DAG, the id a task named `label` gets in it, and its tasks, which a new task joins."""

    @property
    def dag(self) -> TaskOwner[Any]: ...

    def child_id(self, label: str) -> str: ...

    def add_task(self, task: Any) -> None: ...


_group_stack: list[GroupOwner] = []
"""Task groups entered with ``with`` (or a ``@task_group`` function's call), innermost last."""


def current_group(dag: TaskOwner[Any] | None = None) -> GroupOwner | None:
    """The innermost task group whose block is running (of `dag`, when given), or None."""
    if not _group_stack:
        return None
    group = _group_stack[-1]
    return group if dag is None or group.dag is dag else None


def enter_group(group: GroupOwner) -> None:
    """`group`'s block starts: the tasks and groups made now join it."""
    _group_stack.append(group)


def leave_group(group: GroupOwner) -> None:
    """`group`'s block ends (even out of order: a block left by an exception)."""
    if _group_stack and _group_stack[-1] is group:
        _group_stack.pop()
    elif group in _group_stack:
        _group_stack.remove(group)
