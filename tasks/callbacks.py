"""Callbacks: what a task or a DAG asks to run when it ends a state, and running one.

A callback is a Python callable ``fn(context)`` from the DAG file, or the name of a task
in the user's own Celery app (sent with the context as its one argument). The kinds:

- on a task: ``on_success_callback``, ``on_failure_callback``, ``on_retry_callback``;
- on a DAG, for the run's end: ``on_success_callback``, ``on_failure_callback``, and
  ``on_deadline_missed`` when a run is still unfinished at its ``deadline``.

The scheduler never runs one: it only records that one is due (the database does, in the
statement that writes the state) and queues it; a worker runs it (``run_callback``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from sluice.tasks.errors import DagDefinitionError

Callback = Callable[[dict[str, Any]], Any] | str
"""A callable taking the context dict, or the name of a task in the user's Celery app."""

TASK_KINDS = ("on_success_callback", "on_failure_callback", "on_retry_callback")
"""The options of a task that set a callback (a DAG's: `DAG.callbacks`)."""

KIND_OF_OPTION = {
    "on_success_callback": "on_success",
    "on_failure_callback": "on_failure",
    "on_retry_callback": "on_retry",
    "on_deadline_missed": "on_deadline_missed",
}
"""The option that sets a callback → the kind stored with a due callback."""


def check_callback(name: str, value: Any) -> Callback | None:
    """``value`` if it is None, a callable or a non-empty task name; else DagDefinitionError."""
    if value is None or callable(value):
        return value
    if isinstance(value, str) and value.strip():
        return value
    raise DagDefinitionError(f"{name} must be a callable or a Celery task name, got {value!r}")


def kinds_set(callbacks: Mapping[str, Callback | None]) -> list[str]:
    """The kinds of the callbacks set among ``callbacks`` (option name → value), sorted."""
    return sorted(KIND_OF_OPTION[name] for name, value in callbacks.items() if value is not None)


def run_callback(target: Callback, context: dict[str, Any], send: Callable[..., Any]) -> Any:
    """Run ``target`` with ``context``: call it, or (a task name) ``send(name, args=[context])``
    through the worker's Celery app. Whatever it raises is the caller's to record."""
    if isinstance(target, str):
        return send(target, args=[context])
    return target(context)
