"""Sluice authoring API: DAGs, tasks, trigger rules.

This package imports nothing from ``scheduler`` or ``broker``. ``tasks.parsing`` (the DAG
parser subprocess) is deliberately not imported here: it runs as ``python -m tasks.parsing``.
"""

from __future__ import annotations

from tasks.celery_task import CeleryTask, Upstream
from tasks.dag import DAG
from tasks.errors import DagDefinitionError, ResultError, ShellCommandError, Skip, TaskTimeout
from tasks.task import ShellTask, Task, task
from tasks.trigger_rules import TriggerRule

__all__ = [
    "CeleryTask",
    "DAG",
    "DagDefinitionError",
    "ResultError",
    "ShellCommandError",
    "ShellTask",
    "Skip",
    "Task",
    "TaskTimeout",
    "TriggerRule",
    "Upstream",
    "task",
]
