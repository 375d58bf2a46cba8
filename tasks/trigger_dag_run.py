"""`TriggerDagRun`: a task that creates a run of another DAG and, if asked, waits for its
end, as Airflow's `TriggerDagRunOperator` (deferrable).

    TriggerDagRun("start_b", trigger_dag_id="b", conf={"day": 1},
                  wait_for_completion=True, retries=1)

The task holds no worker while the run is created nor while it waits: on its first run
its function defers on `triggers.CreateRun`, which the triggerers resolve from the
database (`scheduler.scheduling.triggered_runs`: a manual run of the target, created with
`create_dagrun`); the task runs again with `{"dag_id", "run_id"}` as its trigger event.
With `wait_for_completion` it then defers on `triggers.RunFinished(dag_id, run_id,
allowed_states + failed_states)` and, resumed, fails (`TriggeredRunFailed`, "run b.X
ended failed") if the run ended in one of `failed_states`.

The run's id is `trigger_run_id`, or else derived from the triggering TI
(`run_ids.derived_run_id`: its DAG, run, task and map index), so every try of the TI
names the same run: a run of that id that exists already counts as created, and a retry
creates no second run (it waits on the first one again).

The task's result (what a downstream task is passed, `sluice.Upstream`) is
`{"dag_id": ..., "run_id": ...}` of the run it created, with `"state"` (its end) when it
waited for it.

A target DAG that does not exist (or is no longer in its folder), a conf over the
deployment's bounds (`SLUICE_MAX_CONF_BYTES`, `SLUICE_MAX_CONF_DEPTH`) or another run
of the target at that logical date fails the task with one line (retries apply). A
paused target gets its run all the same: it stays queued until the DAG is unpaused, as in
Airflow.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from typing import Any

from sluice.tasks.conf_bounds import conf_problem
from sluice.tasks.dag_context import DAG_ID_RE, TaskOwner
from sluice.tasks.errors import DagDefinitionError
from sluice.tasks.run_ids import derived_run_id, run_id_problem
from sluice.tasks.task import Task
from sluice.tasks.triggers import (
    MAX_TRIGGER_BYTES,
    RUN_END_STATES,
    CreateRun,
    RunFinished,
    defer,
)

CONF_MAX_BYTES = MAX_TRIGGER_BYTES - 2048
"""Largest conf a TriggerDagRun may give, in bytes of compact UTF-8 JSON: it travels in
its `CreateRun` trigger (at most `MAX_TRIGGER_BYTES` with the ids). The triggerer checks
it again against the deployment's `SLUICE_MAX_CONF_BYTES`, which may be lower."""
CONF_MAX_DEPTH = 32
"""Deepest nesting of such a conf (the default `SLUICE_MAX_CONF_DEPTH`; the triggerer
checks the deployment's)."""


class TriggeredRunFailed(Exception):
    """The run a TriggerDagRun waited for ended in one of its `failed_states`."""


def end_states(name: str, value: Any) -> tuple[str, ...]:
    """`value` (a state or an iterable of states) as a tuple of run end states, or a
    DagDefinitionError naming `name`."""
    states = (value,) if isinstance(value, str) else value
    if not isinstance(states, Iterable):
        raise DagDefinitionError(f"{name} must be a list of run states, got {value!r}")
    found = tuple(states)
    unknown = [s for s in found if s not in RUN_END_STATES]
    if unknown:
        raise DagDefinitionError(
            f"{name} may hold only {', '.join(RUN_END_STATES)}, got {unknown[0]!r}"
        )
    return found


def _logical_date(value: Any) -> str | None:
    """An aware datetime or its ISO text, as ISO text (None stays None); ValueError else."""
    if value is None:
        return None
    at = dt.datetime.fromisoformat(value) if isinstance(value, str) else value
    if not isinstance(at, dt.datetime):
        raise ValueError(f"logical_date must be a datetime, got {type(value).__name__}")
    if at.tzinfo is None:
        raise ValueError("logical_date must be timezone-aware")
    return at.isoformat()


class TriggerDagRun(Task):
    """Create a run of DAG `trigger_dag_id` (see the module's doc).

    `conf`: the run's conf, a dict, or a callable given the task's context that returns
    one. `trigger_run_id`: the run's id (default: derived from this TI). `logical_date`:
    an aware datetime, its ISO text, or a callable given the context that returns one
    (default: the moment the run is created). `wait_for_completion`: wait, with no worker
    held, until the run ends in `allowed_states` (the task succeeds) or `failed_states`
    (it fails). Takes every other task option (`retries`, `queue`, ...)."""

    def __init__(
        self,
        task_id: str,
        trigger_dag_id: str,
        conf: dict[str, Any] | Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        trigger_run_id: str | None = None,
        logical_date: dt.datetime | str | Callable[[dict[str, Any]], Any] | None = None,
        wait_for_completion: bool = False,
        allowed_states: Iterable[str] | str = ("success",),
        failed_states: Iterable[str] | str = ("failed",),
        *,
        dag: TaskOwner[Task] | None = None,
        **options: Any,
    ) -> None:
        def bad(why: str) -> DagDefinitionError:
            return DagDefinitionError(f"TriggerDagRun {task_id!r}: {why}")

        if not isinstance(trigger_dag_id, str) or not DAG_ID_RE.match(trigger_dag_id):
            raise bad(
                f"trigger_dag_id {trigger_dag_id!r} is not a DAG id (1-250 letters, digits, "
                "'_', '.' or '-')"
            )
        if conf is not None and not callable(conf):
            problem = conf_problem(conf, CONF_MAX_BYTES, CONF_MAX_DEPTH)
            if problem is not None:
                raise bad(problem)
        if trigger_run_id is not None and (problem := run_id_problem(trigger_run_id)):
            raise bad(f"trigger_run_id {problem}")
        if not callable(logical_date):
            try:
                logical_date = _logical_date(logical_date)
            except ValueError as exc:
                raise bad(str(exc).splitlines()[0]) from None
        if not isinstance(wait_for_completion, bool):
            raise bad(f"wait_for_completion must be True or False, got {wait_for_completion!r}")
        try:
            allowed = end_states("allowed_states", allowed_states)
            failed = end_states("failed_states", failed_states)
        except DagDefinitionError as exc:
            raise bad(str(exc)) from None
        if not allowed:
            raise bad("allowed_states must name at least one state")
        if set(allowed) & set(failed):
            raise bad("a state cannot be in both allowed_states and failed_states")
        super().__init__(task_id, python_callable=self._run, dag=dag, **options)
        self.trigger_dag_id = trigger_dag_id
        self.conf = conf
        self.trigger_run_id = trigger_run_id
        self.logical_date = logical_date
        self.wait_for_completion = wait_for_completion
        self.allowed_states = allowed
        self.failed_states = failed

    def _run(self, context: dict[str, Any]) -> dict[str, Any]:
        """The task's function: create the run (deferring on `CreateRun`), then, with
        `wait_for_completion`, wait for its end (deferring on `RunFinished`)."""
        event = context.get("trigger_event")
        if not isinstance(event, dict) or "run_id" not in event:
            defer(self._create_run(context))
        assert isinstance(event, dict)
        run = {"dag_id": str(event["dag_id"]), "run_id": str(event["run_id"])}
        if not self.wait_for_completion:
            return run
        if "state" not in event:  # created: now its end
            states = self.allowed_states + self.failed_states
            defer(RunFinished(run["dag_id"], run["run_id"], states=states))
        state = str(event["state"])
        if state in self.failed_states:
            raise TriggeredRunFailed(f"run {run['dag_id']}.{run['run_id']} ended {state}")
        return {**run, "state": state}

    def _create_run(self, context: dict[str, Any]) -> CreateRun:
        run_id = self.trigger_run_id or derived_run_id(
            str(context["dag_id"]),
            str(context["run_id"]),
            str(context["task_id"]),
            context.get("map_index"),
        )
        conf = self.conf(context) if callable(self.conf) else self.conf
        problem = conf_problem(conf or {}, CONF_MAX_BYTES, CONF_MAX_DEPTH)
        if problem is not None:
            raise ValueError(f"the conf of the run to trigger: {problem}")
        logical = self.logical_date
        at = _logical_date(logical(context) if callable(logical) else logical)
        return CreateRun(self.trigger_dag_id, run_id, conf=conf, logical_date=at)
