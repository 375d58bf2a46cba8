"""Sluice authoring API: DAGs, tasks, trigger rules.

This package imports nothing from ``sluice.scheduler`` or ``sluice.broker``. ``parsing`` (the DAG
parser subprocess) is not imported here: it runs as ``python -m sluice.tasks.parsing``.
"""

from __future__ import annotations

from sluice.tasks.celery_task import CeleryTask, Upstream
from sluice.tasks.dag import DAG
from sluice.tasks.errors import (
    DagDefinitionError,
    ResultError,
    ShellCommandError,
    Skip,
    TaskStopped,
    TaskTimeout,
)
from sluice.tasks.notifiers import Webhook
from sluice.tasks.sensor import PokeReturnValue
from sluice.tasks.task import ShellTask, Task, task
from sluice.tasks.trigger_rules import TriggerRule
from sluice.tasks.triggers import Trigger, TriggerEvent, defer

__all__ = [
    "CeleryTask",
    "DAG",
    "DagDefinitionError",
    "PokeReturnValue",
    "ResultError",
    "ShellCommandError",
    "ShellTask",
    "Skip",
    "Task",
    "TaskStopped",
    "TaskTimeout",
    "Trigger",
    "TriggerEvent",
    "TriggerRule",
    "Upstream",
    "Webhook",
    "defer",
    "task",
]
