"""Runs of other DAGs, without a database: the run id a `TriggerDagRun` TI derives
(cleaning, bound, determinism), what its function defers on and returns at each step,
what an `ExternalTaskSensor`'s poke decides from the states it reads, and the one-line
refusals of bad arguments at DAG definition."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from sluice.scheduler.core.settings import DEFAULTS
from sluice.scheduler.core.states import DagRunState, TaskInstanceState
from sluice.scheduler.scheduling.dagrun import RUN_ID_MAX, check_run_id
from sluice.tasks.dag import DAG
from sluice.tasks.errors import DagDefinitionError, Skip
from sluice.tasks.external_sensor import (
    RUN_STATE_NAMES,
    RUN_STATES,
    TI_STATE_NAMES,
    ExternalTaskFailed,
    ExternalTaskSensor,
)
from sluice.tasks.run_ids import RUN_ID_MAX as AUTHORING_RUN_ID_MAX
from sluice.tasks.run_ids import derived_run_id, run_id_problem
from sluice.tasks.trigger_dag_run import (
    CONF_MAX_BYTES,
    CONF_MAX_DEPTH,
    TriggerDagRun,
    TriggeredRunFailed,
)
from sluice.tasks.triggers import (
    CREATE_RUN_CLASSPATH,
    MAX_TRIGGER_BYTES,
    RESOLVED_BY_THE_ENGINE,
    RUN_FINISHED_CLASSPATH,
    TaskDeferred,
)

DAY = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)


def context(**extra: Any) -> dict[str, Any]:
    base = {
        "dag_id": "a",
        "run_id": "manual__2026-03-01T00:00:00+00:00",
        "task_id": "start_b",
        "map_index": None,
        "logical_date": DAY.isoformat(),
        "trigger_event": None,
    }
    return {**base, **extra}


# -- the derived run id ------------------------------------------------------------------
def test_a_plain_tis_run_id_is_readable_and_accepted() -> None:
    run_id = derived_run_id("a", "manual__2026-03-01T00:00:00+00:00", "start_b")
    assert run_id == "triggered__a__manual__2026-03-01T00:00:00+00:00__start_b"
    assert check_run_id(run_id) == run_id
    assert derived_run_id("a", "r", "t", 3) == "triggered__a__r__t__3"
    assert derived_run_id("a", "r", "t", -1) == derived_run_id("a", "r", "t", None)


def test_the_same_ti_always_derives_the_same_id_and_other_tis_others() -> None:
    one = derived_run_id("a", "r 1", "t", 0)
    assert one == derived_run_id("a", "r 1", "t", 0)  # every try names one run
    others = {
        derived_run_id("a", "r 1", "t", 1),
        derived_run_id("a", "r_1", "t", 0),  # cleans alike, hashes apart
        derived_run_id("b", "r 1", "t", 0),
        derived_run_id("a", "r 1", "u", 0),
    }
    assert one not in others and len(others) == 4


@pytest.mark.parametrize(
    "run_id",
    ["with space", " lead", "tab\there", "ünïcödé", "semi;colon", "quote'\"", "\ud800lone"],
)
def test_what_a_run_id_must_not_hold_is_cleaned_and_hashed(run_id: str) -> None:
    derived = derived_run_id("a", run_id, "t")
    assert check_run_id(derived) == derived
    assert run_id_problem(derived) is None
    assert derived.startswith("triggered__a__") and "~" in derived
    assert all(c.isascii() and (c.isalnum() or c in "_.:+~-") for c in derived), derived
    assert derived.encode("utf-8")  # no lone surrogate left


def test_a_long_id_is_cut_to_the_bound_and_its_tail_hashed() -> None:
    assert AUTHORING_RUN_ID_MAX == RUN_ID_MAX
    long_run = "r" * 250
    first = derived_run_id("d" * 250, long_run, "t" * 250, 7)
    second = derived_run_id("d" * 250, long_run, "t" * 250, 8)  # differs in the cut tail
    assert len(first) == RUN_ID_MAX and len(second) == RUN_ID_MAX
    assert first != second
    assert check_run_id(first) == first
    assert first == derived_run_id("d" * 250, long_run, "t" * 250, 7)


@pytest.mark.parametrize(
    "run_id", ["", "   ", " x", "x ", "a/b", "nul\x00", "x" * 251, "ok", "x" * 250]
)
def test_the_authoring_rules_of_a_run_id_are_the_schedulers(run_id: str) -> None:
    try:
        check_run_id(run_id)
        accepted = True
    except ValueError:
        accepted = False
    assert (run_id_problem(run_id) is None) == accepted


def test_the_bounds_are_the_deployments_defaults_and_fit_a_trigger() -> None:
    assert DEFAULTS.max_conf_depth == CONF_MAX_DEPTH
    assert min(DEFAULTS.max_conf_bytes, MAX_TRIGGER_BYTES) >= CONF_MAX_BYTES
    assert set(RUN_STATE_NAMES) == set(DagRunState)
    assert set(TI_STATE_NAMES) == set(TaskInstanceState)
    assert {CREATE_RUN_CLASSPATH, RUN_FINISHED_CLASSPATH} <= RESOLVED_BY_THE_ENGINE


# -- TriggerDagRun's steps -----------------------------------------------------------------
def test_the_first_run_defers_on_creating_the_run_and_without_waiting_returns_it() -> None:
    with DAG("a", schedule=None):
        start = TriggerDagRun("start_b", trigger_dag_id="b", conf={"day": 1}, retries=2)
    assert start.retries == 2
    with pytest.raises(TaskDeferred) as deferred:
        start._run(context())
    assert deferred.value.classpath == CREATE_RUN_CLASSPATH
    run_id = "triggered__a__manual__2026-03-01T00:00:00+00:00__start_b"
    assert deferred.value.kwargs == {
        "dag_id": "b",
        "run_id": run_id,
        "conf": {"day": 1},
        "logical_date": None,
    }
    created = {"dag_id": "b", "run_id": run_id}
    assert start._run(context(trigger_event=created)) == created


def test_waiting_defers_on_the_runs_end_and_fails_on_a_failed_state() -> None:
    with DAG("a", schedule=None):
        start = TriggerDagRun(
            "start_b",
            trigger_dag_id="b",
            trigger_run_id="nightly",
            logical_date=lambda c: c["logical_date"],
            wait_for_completion=True,
        )
    with pytest.raises(TaskDeferred) as deferred:
        start._run(context())
    assert deferred.value.kwargs["run_id"] == "nightly"
    assert deferred.value.kwargs["logical_date"] == DAY.isoformat()
    created = {"dag_id": "b", "run_id": "nightly"}
    with pytest.raises(TaskDeferred) as waiting:
        start._run(context(trigger_event=created))
    assert waiting.value.classpath == RUN_FINISHED_CLASSPATH
    assert waiting.value.kwargs == {
        "dag_id": "b",
        "run_id": "nightly",
        "states": ["success", "failed"],
    }
    ended = {**created, "state": "success"}
    assert start._run(context(trigger_event=ended)) == ended
    with pytest.raises(TriggeredRunFailed, match=r"^run b\.nightly ended failed$"):
        start._run(context(trigger_event={**created, "state": "failed"}))


def test_a_conf_made_at_run_time_is_checked_then() -> None:
    with DAG("a", schedule=None):
        start = TriggerDagRun("start_b", trigger_dag_id="b", conf=lambda c: {"x": float("nan")})
    with pytest.raises(ValueError, match="NaN"):
        start._run(context())


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"trigger_dag_id": "no/such"}, "trigger_dag_id 'no/such' is not a DAG id"),
        ({"trigger_dag_id": ""}, "is not a DAG id"),
        ({"trigger_dag_id": "b", "conf": [1, 2]}, "conf must be a dict, got list"),
        ({"trigger_dag_id": "b", "conf": {"x": "a" * CONF_MAX_BYTES}}, "bytes of JSON"),
        ({"trigger_dag_id": "b", "conf": {"x": float("inf")}}, "NaN or Infinity"),
        ({"trigger_dag_id": "b", "conf": {1: "x"}}, "keys must be text"),
        ({"trigger_dag_id": "b", "conf": {"x": object()}}, "is not a JSON value"),
        ({"trigger_dag_id": "b", "trigger_run_id": "a/b"}, "trigger_run_id must not contain"),
        ({"trigger_dag_id": "b", "logical_date": "yesterday"}, "Invalid isoformat"),
        ({"trigger_dag_id": "b", "logical_date": "2026-01-01T00:00:00"}, "timezone-aware"),
        ({"trigger_dag_id": "b", "wait_for_completion": "yes"}, "True or False"),
        ({"trigger_dag_id": "b", "allowed_states": ["queued"]}, "allowed_states may hold"),
        ({"trigger_dag_id": "b", "allowed_states": []}, "at least one state"),
        ({"trigger_dag_id": "b", "failed_states": ["success"]}, "both allowed_states"),
        ({"trigger_dag_id": "b", "poke_interval": 5}, "unknown option(s) poke_interval"),
    ],
)
def test_bad_trigger_dag_run_arguments_are_one_line(kwargs: dict[str, Any], says: str) -> None:
    with DAG("a", schedule=None), pytest.raises(DagDefinitionError) as refused:
        TriggerDagRun("start_b", **kwargs)
    message = str(refused.value)
    assert says in message and "\n" not in message, message


def test_a_conf_nested_too_deep_is_refused() -> None:
    conf: dict[str, Any] = {}
    inner = conf
    for _ in range(CONF_MAX_DEPTH):
        inner["x"] = {}
        inner = inner["x"]
    with DAG("a", schedule=None), pytest.raises(DagDefinitionError, match="levels deep"):
        TriggerDagRun("start_b", trigger_dag_id="b", conf=conf)


# -- ExternalTaskSensor's pokes --------------------------------------------------------------
class Lookup:
    def __init__(self, states: list[str] | None) -> None:
        self.states = states
        self.asked: list[tuple[str, dt.datetime, str | None]] = []

    def __call__(
        self, dag_id: str, logical_date: dt.datetime, task_id: str | None
    ) -> list[str] | None:
        self.asked.append((dag_id, logical_date, task_id))
        return self.states


def poke(sensor: ExternalTaskSensor, states: list[str] | None) -> tuple[bool, Lookup]:
    lookup = Lookup(states)
    return sensor._poke(context(**{RUN_STATES: lookup})), lookup


def test_a_poke_reads_the_run_of_the_same_logical_date_less_the_delta() -> None:
    with DAG("c", schedule=None):
        run_wait = ExternalTaskSensor("wait_a", external_dag_id="a", mode="reschedule")
        task_wait = ExternalTaskSensor(
            "wait_t",
            external_dag_id="a",
            external_task_id="t",
            execution_delta=dt.timedelta(hours=1),
        )
    assert run_wait.sensor is not None and run_wait.sensor.mode == "reschedule"
    assert poke(run_wait, None)[0] is False  # no such run yet
    assert poke(run_wait, ["running"])[0] is False
    done, lookup = poke(run_wait, ["success"])
    assert done is True and lookup.asked == [("a", DAY, None)]
    done, lookup = poke(task_wait, ["success", "success"])  # a mapped task: every index
    assert done is True and lookup.asked == [("a", DAY - dt.timedelta(hours=1), "t")]
    assert poke(task_wait, ["success", "running"])[0] is False
    assert poke(task_wait, [])[0] is False  # the run has no such task (yet)


def test_a_failed_state_fails_at_once_or_skips_with_soft_fail() -> None:
    with DAG("c", schedule=None):
        hard = ExternalTaskSensor("hard", external_dag_id="a", external_task_id="t")
        soft = ExternalTaskSensor("soft", external_dag_id="a", soft_fail=True)
        skips = ExternalTaskSensor("skips", external_dag_id="a", skipped_states=["queued"])
    with pytest.raises(ExternalTaskFailed, match="task 't' of the run of DAG 'a' at .* is"):
        poke(hard, ["success", "upstream_failed", "failed"])
    with pytest.raises(Skip, match="is failed"):
        poke(soft, ["failed"])
    with pytest.raises(Skip):
        poke(skips, ["queued"])


def test_a_poke_without_the_workers_lookup_says_so() -> None:
    with DAG("c", schedule=None):
        sensor = ExternalTaskSensor("wait_a", external_dag_id="a")
    with pytest.raises(RuntimeError, match="pokes on a Sluice worker"):
        sensor._poke(context())


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"external_dag_id": "a b"}, "external_dag_id 'a b' is not a DAG id"),
        ({"external_dag_id": "a", "external_task_id": ""}, "is not a task id"),
        ({"external_dag_id": "a", "mode": "sometimes"}, "sensor mode must be"),
        ({"external_dag_id": "a", "poke_interval": 0}, "poke_interval must be a positive"),
        ({"external_dag_id": "a", "allowed_states": ["skipped"]}, "allowed_states may hold"),
        (
            {"external_dag_id": "a", "external_task_id": "t", "allowed_states": ["done"]},
            "got 'done'",
        ),
        ({"external_dag_id": "a", "failed_states": ["success"]}, "only one of"),
        ({"external_dag_id": "a", "execution_delta": 3600}, "must be a timedelta"),
        ({"external_dag_id": "a", "allowed_states": ()}, "at least one state"),
    ],
)
def test_bad_sensor_arguments_are_one_line(kwargs: dict[str, Any], says: str) -> None:
    with DAG("c", schedule=None), pytest.raises(DagDefinitionError) as refused:
        ExternalTaskSensor("wait_a", **kwargs)
    message = str(refused.value)
    assert says in message and "\n" not in message, message
