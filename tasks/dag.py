"""The DAG object: identity, schedule and limits, and the tasks registered in it.

Invariants: ``dag_id`` matches ``DAG_ID_RE``; ``start_date``/``end_date`` are aware UTC
datetimes; a scheduled DAG has a ``start_date``; ``tasks`` keeps definition order and task ids
are unique; dependencies only link tasks of the same DAG (checked in ``task.py``); every
param without a default belongs to a DAG without a schedule (its runs are triggered with a
conf), and every default fits its param (``params.py``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Any

from sluice.tasks.assets import condition_json, is_asset_schedule
from sluice.tasks.callbacks import Callback, check_callback
from sluice.tasks.dag_context import DAG_ID_RE, enter, leave
from sluice.tasks.errors import DagDefinitionError
from sluice.tasks.params import params_schema
from sluice.tasks.task import Task
from sluice.tasks.watch import Watch

#: Schedule presets and the cron expression each stands for (evaluated in UTC).
CRON_PRESETS: dict[str, str] = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}

Schedule = str | timedelta | None

# Lists collecting every DAG constructed while they are active (the loader uses one per
# imported file). The DAGs entered with ``with`` are in ``dag_context``.
_collectors: list[list[DAG]] = []


@contextmanager
def collect_dags() -> Iterator[list[DAG]]:
    """Collect every DAG constructed inside the block, in construction order."""
    found: list[DAG] = []
    _collectors.append(found)
    try:
        yield found
    finally:
        _collectors.remove(found)


def validate_schedule(schedule: object) -> Schedule:
    """Return ``schedule`` if it is None, a preset, a cron expression or a positive timedelta."""
    if schedule is None:
        return None
    if isinstance(schedule, timedelta):
        if schedule <= timedelta(0):
            raise DagDefinitionError(f"schedule must be a positive timedelta, got {schedule}")
        return schedule
    if isinstance(schedule, str):
        if schedule.startswith("@"):
            if schedule not in CRON_PRESETS:
                presets = ", ".join(CRON_PRESETS)
                raise DagDefinitionError(f"unknown schedule preset {schedule!r} (use {presets})")
            return schedule
        from croniter import croniter  # on use: 14 ms of every DAG parse subprocess's start

        if croniter.is_valid(schedule):
            return schedule
        raise DagDefinitionError(f"invalid cron expression {schedule!r}")
    raise DagDefinitionError(
        f"schedule must be None, a cron string, a preset or a timedelta, got {schedule!r}"
    )


def _aware_utc(name: str, value: object, dag_id: str) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise DagDefinitionError(f"DAG '{dag_id}': {name} must be a datetime, got {value!r}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise DagDefinitionError(
            f"DAG '{dag_id}': {name} {value.isoformat()} is naive; give it a timezone "
            "(e.g. tzinfo=timezone.utc)"
        )
    return value.astimezone(UTC)


def _caller_file() -> str:
    """The ``__file__`` of the first frame outside this module (where the DAG is defined)."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__") == __name__:
        frame = frame.f_back  # type: ignore[assignment]
    return str(frame.f_globals.get("__file__") or "") if frame is not None else ""


class DAG:
    """A named graph of tasks with a schedule; a context manager that collects its tasks."""

    def __init__(
        self,
        dag_id: str,
        schedule: object = None,
        start_date: datetime | None = None,
        end_date: datetime | None = None,
        catchup: bool = False,
        max_active_runs: int = 16,
        max_active_tasks: int = 32,
        default_args: dict[str, Any] | None = None,
        description: str | None = None,
        dagrun_timeout: timedelta | None = None,
        on_success_callback: Callback | None = None,
        on_failure_callback: Callback | None = None,
        on_deadline_missed: Callback | None = None,
        deadline: timedelta | None = None,
        params: dict[str, Any] | None = None,
    ) -> None:
        if not isinstance(dag_id, str) or not DAG_ID_RE.match(dag_id):
            raise DagDefinitionError(
                f"invalid dag_id {dag_id!r}: use 1-250 letters, digits, '_', '.' or '-', "
                "not only dots"
            )
        self.dag_id = dag_id
        self.asset_condition: dict[str, Any] | None = None
        """Of a DAG scheduled on assets: its condition (`assets.condition_json`)."""
        self.watch: Watch | None = None
        """Of a DAG scheduled by a watched source (`sluice.Watch`)."""
        self.schedule: Schedule = None
        """A time schedule (None for a DAG on assets or a watch: `asset_condition`, `watch`)."""
        if isinstance(schedule, Watch):
            self.watch = schedule
        elif is_asset_schedule(schedule):
            try:
                self.asset_condition = condition_json(schedule)
            except DagDefinitionError as exc:
                raise DagDefinitionError(f"DAG '{dag_id}': {exc}") from None
        else:
            self.schedule = validate_schedule(schedule)
        self.start_date = _aware_utc("start_date", start_date, dag_id)
        self.end_date = _aware_utc("end_date", end_date, dag_id)
        if self.schedule is not None and self.start_date is None:
            raise DagDefinitionError(f"DAG '{dag_id}' has a schedule but no start_date")
        if self.start_date and self.end_date and self.end_date < self.start_date:
            raise DagDefinitionError(f"DAG '{dag_id}': end_date is before start_date")
        try:  # its params as one JSON Schema object (None for none), checked
            self.params_schema: dict[str, Any] | None = params_schema(params)
        except DagDefinitionError as exc:
            raise DagDefinitionError(f"DAG '{dag_id}': {exc}") from None
        self.params: dict[str, Any] = dict(params or {})
        """Its params as given: `sluice.Param`s, or plain default values."""
        required = (self.params_schema or {}).get("required") or []
        scheduled = self.schedule is not None or self.asset_condition or self.watch
        if required and scheduled:
            raise DagDefinitionError(
                f"DAG '{dag_id}': param {required[0]!r} has no default, but the DAG has a "
                "schedule, whose runs have no conf: give it a default"
            )
        for name, value in (
            ("max_active_runs", max_active_runs),
            ("max_active_tasks", max_active_tasks),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise DagDefinitionError(f"DAG '{dag_id}': {name} must be an int >= 1")
        if dagrun_timeout is not None and (
            not isinstance(dagrun_timeout, timedelta) or dagrun_timeout <= timedelta(0)
        ):
            raise DagDefinitionError(f"DAG '{dag_id}': dagrun_timeout must be a positive timedelta")
        self.dagrun_timeout = dagrun_timeout
        if deadline is not None and (
            not isinstance(deadline, timedelta) or deadline <= timedelta(0)
        ):
            raise DagDefinitionError(f"DAG '{dag_id}': deadline must be a positive timedelta")
        self.deadline = deadline
        """A run still unfinished this long after it was queued fires on_deadline_missed."""
        try:
            self.callbacks: dict[str, Callback | None] = {
                "on_success_callback": check_callback("on_success_callback", on_success_callback),
                "on_failure_callback": check_callback("on_failure_callback", on_failure_callback),
                "on_deadline_missed": check_callback("on_deadline_missed", on_deadline_missed),
            }
        except DagDefinitionError as exc:
            raise DagDefinitionError(f"DAG '{dag_id}': {exc}") from None
        if on_deadline_missed is not None and deadline is None:
            raise DagDefinitionError(f"DAG '{dag_id}': on_deadline_missed needs a deadline")
        if default_args is not None and not isinstance(default_args, dict):
            raise DagDefinitionError(f"DAG '{dag_id}': default_args must be a dict")
        self.catchup = bool(catchup)
        self.max_active_runs = max_active_runs
        self.max_active_tasks = max_active_tasks
        self.default_args: dict[str, Any] = dict(default_args or {})
        self.description = description
        self.fileloc: str = _caller_file()
        self.tasks: dict[str, Task] = {}
        self.task_groups: dict[str, Any] = {}
        """Its task groups by id, in definition order (``task_group.TaskGroup``)."""
        for found in _collectors:
            found.append(self)

    def __repr__(self) -> str:
        return f"<DAG {self.dag_id}>"

    def __enter__(self) -> DAG:
        enter(self)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        leave(self)

    def add_task(self, task: Task) -> None:
        """Register ``task``; a second task with the same id is an error."""
        if task.task_id in self.tasks:
            raise DagDefinitionError(f"duplicate task_id '{task.task_id}' in DAG '{self.dag_id}'")
        if task.task_id in self.task_groups:
            raise DagDefinitionError(
                f"task_id '{task.task_id}' in DAG '{self.dag_id}' is the id of a task group"
            )
        self.tasks[task.task_id] = task

    def get_task(self, task_id: str) -> Task:
        """The task named ``task_id``; ``KeyError`` with a clear message if absent."""
        try:
            return self.tasks[task_id]
        except KeyError:
            raise KeyError(f"DAG '{self.dag_id}' has no task '{task_id}'") from None

    @property
    def roots(self) -> list[Task]:
        """Tasks without upstream, in definition order."""
        return [t for t in self.tasks.values() if not t.upstream_task_ids]

    def validate(self) -> None:
        """Raise ``DagDefinitionError`` (one line, naming the tasks) if the graph has a cycle."""
        cycle = self._find_cycle()
        if cycle:
            raise DagDefinitionError(f"cycle in DAG '{self.dag_id}': {' >> '.join(cycle)}")

    def _find_cycle(self) -> list[str] | None:
        white, grey, black = 0, 1, 2
        color = dict.fromkeys(self.tasks, white)
        for root in self.tasks:
            if color[root] != white:
                continue
            path: list[str] = [root]
            stack: list[Iterator[str]] = [iter(sorted(self.tasks[root].downstream_task_ids))]
            color[root] = grey
            while stack:
                child = next(stack[-1], None)
                if child is None:
                    stack.pop()
                    color[path.pop()] = black
                elif color.get(child, black) == grey:
                    return [*path[path.index(child) :], child]
                elif color.get(child) == white:
                    color[child] = grey
                    path.append(child)
                    stack.append(iter(sorted(self.tasks[child].downstream_task_ids)))
        return None
