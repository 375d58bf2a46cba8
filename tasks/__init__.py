"""Sluice authoring API: DAGs, tasks, trigger rules.

This package imports nothing from ``sluice.scheduler`` or ``sluice.broker``. ``parsing`` (the DAG
parser subprocess) is not imported here: it runs as ``python -m sluice.tasks.parsing``.
"""

from __future__ import annotations

from sluice.tasks.assets import Asset
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
from sluice.tasks.external_sensor import ExternalTaskSensor
from sluice.tasks.limits import Concurrency, RateLimit
from sluice.tasks.notifiers import Webhook
from sluice.tasks.params import Param
from sluice.tasks.secrets import Connection, ConnectionNotFound, Variable, VariableNotFound
from sluice.tasks.sensor import PokeReturnValue
from sluice.tasks.task import ShellTask, Task, task
from sluice.tasks.task_group import TaskGroup, task_group
from sluice.tasks.trigger_dag_run import TriggerDagRun
from sluice.tasks.trigger_rules import TriggerRule
from sluice.tasks.triggers import Trigger, TriggerEvent, defer
from sluice.tasks.watch import RunRequest, Watch

__all__ = [
    "Asset",
    "CeleryTask",
    "Concurrency",
    "Connection",
    "ConnectionNotFound",
    "DAG",
    "DagDefinitionError",
    "ExternalTaskSensor",
    "Param",
    "PokeReturnValue",
    "RateLimit",
    "ResultError",
    "RunRequest",
    "ShellCommandError",
    "ShellTask",
    "Skip",
    "Task",
    "TaskGroup",
    "TaskStopped",
    "TaskTimeout",
    "Trigger",
    "TriggerDagRun",
    "TriggerEvent",
    "TriggerRule",
    "Upstream",
    "Variable",
    "VariableNotFound",
    "Watch",
    "Webhook",
    "defer",
    "task",
    "task_group",
]
