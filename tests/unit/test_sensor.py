"""`tasks.sensor.sense` with a clock of its own: pokes, waits, reschedules, timeouts."""

from __future__ import annotations

import datetime as dt

import pytest

from sluice.tasks.errors import DagDefinitionError, Skip
from sluice.tasks.sensor import (
    PokeReturnValue,
    Reschedule,
    SensorTimeout,
    Waiting,
    sense,
    sensor_options,
)

T0 = dt.datetime(2026, 12, 6, tzinfo=dt.UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> dt.datetime:
        return self.now


def test_a_reschedule_poke_that_finds_nothing_asks_for_the_next_one() -> None:
    options = sensor_options(poke_interval=10, timeout=100, mode="reschedule")
    clock = Clock()
    with pytest.raises(Reschedule) as asked:
        sense(options, lambda: False, Waiting(1, T0, 0), clock=clock)
    assert asked.value.at == T0 + dt.timedelta(seconds=10)
    assert asked.value.waiting == Waiting(1, T0, 1)
    assert asked.value.waiting.stored() == {"try": 1, "since": T0.isoformat(), "pokes": 1}


def test_backoff_doubles_and_no_wait_runs_past_the_timeout() -> None:
    options = sensor_options(
        poke_interval=10, timeout=65, mode="reschedule", exponential_backoff=True
    )
    clock = Clock()
    clock.now = T0 + dt.timedelta(seconds=30)
    with pytest.raises(Reschedule) as asked:  # the third empty poke: 10 * 2**2 = 40 s
        sense(options, lambda: False, Waiting(1, T0, 2), clock=clock)
    assert asked.value.at == T0 + dt.timedelta(seconds=65)  # capped at the timeout


def test_past_the_timeout_a_sensor_fails_or_skips() -> None:
    clock = Clock()
    clock.now = T0 + dt.timedelta(seconds=100)
    hard = sensor_options(poke_interval=1, timeout=100, mode="reschedule")
    with pytest.raises(SensorTimeout, match="timed out after 100 s"):
        sense(hard, lambda: False, Waiting(1, T0, 9), clock=clock)
    soft = sensor_options(poke_interval=1, timeout=100, mode="reschedule", soft_fail=True)
    with pytest.raises(Skip):
        sense(soft, lambda: False, Waiting(1, T0, 9), clock=clock)


def test_poke_mode_waits_between_pokes_and_returns_the_value() -> None:
    options = sensor_options(poke_interval=0.01, timeout=5, mode="poke")
    answers = iter([False, PokeReturnValue(False), PokeReturnValue(True, xcom_value=7)])
    assert sense(options, lambda: next(answers), Waiting(1, _real(), 0), clock=_real) == 7


def test_a_stopped_poke_mode_sensor_stops_while_it_waits() -> None:
    options = sensor_options(poke_interval=60, timeout=600, mode="poke")
    with pytest.raises(RuntimeError, match="stopped"):
        sense(
            options,
            lambda: False,
            Waiting(1, _real(), 0),
            clock=_real,
            stopped=lambda: RuntimeError("stopped"),
        )


@pytest.mark.parametrize(
    "stored",
    [
        None,
        {},
        {"try": 2, "since": T0.isoformat(), "pokes": 3},
        {"try": 1, "since": "x"},
        {"try": 1, "since": T0.isoformat(), "pokes": "many"},
        [1, 2],
        "junk",
    ],
)
def test_a_state_of_another_try_or_that_does_not_parse_starts_afresh(stored: object) -> None:
    assert Waiting.of(stored, 1, T0) == Waiting(1, T0, 0)


def test_the_state_of_this_try_is_kept() -> None:
    since = T0 - dt.timedelta(hours=1)
    assert Waiting.of({"try": 1, "since": since.isoformat(), "pokes": 4}, 1, T0) == Waiting(
        1, since, 4
    )


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"mode": "sometimes"}, "mode must be 'poke' or 'reschedule'"),
        ({"poke_interval": 0}, "poke_interval must be a positive"),
        ({"timeout": dt.timedelta(seconds=-1)}, "timeout must be a positive"),
        ({"timeout": True}, "timeout must be a positive"),
    ],
)
def test_bad_options_are_a_dag_definition_error(options: dict[str, object], says: str) -> None:
    with pytest.raises(DagDefinitionError, match=says):
        sensor_options(**options)  # type: ignore[arg-type]


def _real() -> dt.datetime:
    return dt.datetime.now(dt.UTC)
