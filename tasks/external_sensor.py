"""`ExternalTaskSensor`: a sensor that waits for another DAG's run of the same logical
date (minus `execution_delta`), or for a task of that run, as Airflow's.

    ExternalTaskSensor("wait_a", external_dag_id="a", external_task_id=None,
                       mode="reschedule", poke_interval=30, timeout=3600)

Each poke reads the state of the run of `external_dag_id` at this run's logical date
(minus `execution_delta`), or of its TIs of `external_task_id` (every index of a mapped
task). Done when it is in `allowed_states` (every index, for a mapped task); the task
fails at once when it is in `failed_states` (any index), or is skipped with `soft_fail`;
it is skipped when it is in `skipped_states`. A poke that finds no such run (or no such
task in it) finds nothing yet. The rest is `@task.sensor`'s (`tasks.sensor`): `mode`
(`poke`, or `reschedule`: `up_for_reschedule` between pokes, no worker held),
`poke_interval`, `timeout` (past it the task fails, or is skipped with `soft_fail`) and
`exponential_backoff`.

How a poke reads another run's state: tasks get no database handle, and user code must
not get one (a session can write anything, and a task runs with none of the deployment's
secrets). So the worker gives this sensor, and no other task, a read-only lookup through
its context (`context[RUN_STATES]`, a `RunStates`: DAG id, logical date, task id ->
the states found), backed by one indexed query of its own
(`scheduler.core.queries.run_states`): the worker runner adds it for an
`ExternalTaskSensor` alone (`broker.worker.runner._sense`). The lookup answers states,
nothing else, and cannot write. A trigger resolved by the engine would have served a
deferrable sensor, but `reschedule` mode, as Airflow's, pokes on a worker.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any, Protocol

from sluice.tasks.dag_context import DAG_ID_RE, TaskOwner
from sluice.tasks.errors import DagDefinitionError, Skip
from sluice.tasks.sensor import sensor_options
from sluice.tasks.task import Task

RUN_STATES = "sluice.run_states"
"""The context key of the lookup the worker gives an ExternalTaskSensor."""

RUN_STATE_NAMES = ("queued", "running", "success", "failed")
"""A DAG run's states (`scheduler.core.states.DagRunState`)."""
TI_STATE_NAMES = (
    "none",
    "scheduled",
    "queued",
    "running",
    "success",
    "failed",
    "up_for_retry",
    "up_for_reschedule",
    "deferred",
    "upstream_failed",
    "skipped",
    "removed",
)
"""A task instance's states (`scheduler.core.states.TaskInstanceState`)."""


class RunStates(Protocol):
    """The read-only lookup: the state of DAG `dag_id`'s run at `logical_date` (a list of
    one) or, with `task_id`, the states of that run's TIs of the task (one per map
    index); None when there is no such run."""

    def __call__(
        self, dag_id: str, logical_date: dt.datetime, task_id: str | None
    ) -> list[str] | None: ...


class ExternalTaskFailed(Exception):
    """The awaited run (or task) is in one of the sensor's `failed_states`."""


def _states(task_id: str, name: str, value: Any, known: tuple[str, ...]) -> tuple[str, ...]:
    states = () if value is None else (value,) if isinstance(value, str) else value
    if not isinstance(states, Iterable):
        raise DagDefinitionError(
            f"ExternalTaskSensor {task_id!r}: {name} must be a list of states, got {value!r}"
        )
    found = tuple(states)
    unknown = [s for s in found if s not in known]
    if unknown:
        raise DagDefinitionError(
            f"ExternalTaskSensor {task_id!r}: {name} may hold only {', '.join(known)}, "
            f"got {unknown[0]!r}"
        )
    return found


class ExternalTaskSensor(Task):
    """Wait for DAG `external_dag_id`'s run of this run's logical date (minus
    `execution_delta`), or for its task `external_task_id` (see the module's doc).
    `allowed_states`, `failed_states` and `skipped_states` are run states
    (queued, running, success, failed) without `external_task_id`, TI states with it.
    Takes the sensor options of `@task.sensor` and every other task option."""

    def __init__(
        self,
        task_id: str,
        external_dag_id: str,
        external_task_id: str | None = None,
        allowed_states: Iterable[str] | str = ("success",),
        failed_states: Iterable[str] | str | None = ("failed",),
        skipped_states: Iterable[str] | str | None = None,
        execution_delta: dt.timedelta | None = None,
        *,
        poke_interval: Any = 60.0,
        timeout: Any = 7 * 24 * 3600.0,
        mode: str = "poke",
        soft_fail: bool = False,
        exponential_backoff: bool = False,
        dag: TaskOwner[Task] | None = None,
        **options: Any,
    ) -> None:
        def bad(why: str) -> DagDefinitionError:
            return DagDefinitionError(f"ExternalTaskSensor {task_id!r}: {why}")

        if not isinstance(external_dag_id, str) or not DAG_ID_RE.match(external_dag_id):
            raise bad(f"external_dag_id {external_dag_id!r} is not a DAG id")
        if external_task_id is not None and (
            not isinstance(external_task_id, str) or not DAG_ID_RE.match(external_task_id)
        ):
            raise bad(f"external_task_id {external_task_id!r} is not a task id")
        known = RUN_STATE_NAMES if external_task_id is None else TI_STATE_NAMES
        allowed = _states(task_id, "allowed_states", allowed_states, known)
        failed = _states(task_id, "failed_states", failed_states, known)
        skipped = _states(task_id, "skipped_states", skipped_states, known)
        if not allowed:
            raise bad("allowed_states must name at least one state")
        for one, other in ((allowed, failed), (allowed, skipped), (failed, skipped)):
            if set(one) & set(other):
                raise bad("a state can be in only one of allowed, failed and skipped states")
        if execution_delta is not None and not isinstance(execution_delta, dt.timedelta):
            raise bad(f"execution_delta must be a timedelta, got {execution_delta!r}")
        try:
            checked = sensor_options(
                poke_interval=poke_interval,
                timeout=timeout,
                mode=mode,
                soft_fail=soft_fail,
                exponential_backoff=exponential_backoff,
            )
        except DagDefinitionError as exc:
            raise bad(str(exc)) from None
        super().__init__(task_id, python_callable=self._poke, dag=dag, **options)
        self.sensor = checked
        self.external_dag_id = external_dag_id
        self.external_task_id = external_task_id
        self.allowed_states = allowed
        self.failed_states = failed
        self.skipped_states = skipped
        self.execution_delta = execution_delta or dt.timedelta(0)

    def _poke(self, context: dict[str, Any]) -> bool:
        """One poke: whether the awaited run (or task) is in `allowed_states`;
        `ExternalTaskFailed` (or `Skip`, with `soft_fail`) when it is in `failed_states`,
        `Skip` when it is in `skipped_states`."""
        lookup = context.get(RUN_STATES)
        if not callable(lookup):
            raise RuntimeError(
                "an ExternalTaskSensor pokes on a Sluice worker, which gives it the "
                "other runs' states"
            )
        at = dt.datetime.fromisoformat(str(context["logical_date"])) - self.execution_delta
        states = lookup(self.external_dag_id, at, self.external_task_id)
        if not states:
            return False
        what = f"the run of DAG '{self.external_dag_id}' at {at.isoformat()}"
        if self.external_task_id is not None:
            what = f"task '{self.external_task_id}' of {what}"
        failed = next((s for s in states if s in self.failed_states), None)
        if failed is not None:
            why = f"{what} is {failed}"
            assert self.sensor is not None
            if self.sensor.soft_fail:
                raise Skip(why)
            raise ExternalTaskFailed(why)
        if all(s in self.skipped_states for s in states):
            raise Skip(f"{what} is {states[0]}")
        return all(s in self.allowed_states for s in states)
