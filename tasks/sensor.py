"""Sensors: tasks that poke until something is true (`@task.sensor`), as Airflow's.

The function returns a bool, or `PokeReturnValue(is_done, xcom_value)` whose value becomes
the task's result. `mode="poke"` keeps the try running between pokes (`sense` loops,
sleeping `poke_interval`); `mode="reschedule"` ends the try after a poke that found
nothing: `sense` raises `Reschedule`, and the worker records the TI `up_for_reschedule`
until its next poke, holding no worker and no pool slot, its `try_number` unchanged.

`timeout` counts from the try's first poke, across reschedules (`Waiting.since`); a poke
past it that finds nothing fails the task without retry (`SensorTimeout`), or skips it
with `soft_fail=True`. With `exponential_backoff`, the wait after the n-th empty poke is
`poke_interval * 2 ** (n - 1)`. No wait runs past the timeout: the last poke is at it.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from sluice.tasks.errors import DagDefinitionError, Skip

MODES = ("poke", "reschedule")
SLEEP_STEP = 0.2
"""Seconds between two looks at a stop while a poke-mode sensor waits."""


class SensorTimeout(Exception):
    """A sensor past its `timeout`: its task fails without retry."""


class Reschedule(Exception):  # noqa: N818 - what it asks for, as Airflow's AirflowRescheduleException
    """A reschedule-mode sensor's poke found nothing: its TI is `up_for_reschedule`
    until `at`; `waiting` is what the next poke needs (stored on the TI)."""

    def __init__(self, at: dt.datetime, waiting: Waiting) -> None:
        super().__init__(f"next poke at {at.isoformat()}")
        self.at = at
        self.waiting = waiting


@dataclass(frozen=True)
class PokeReturnValue:
    """What a sensor's function may return: whether it is done, and the task's result."""

    is_done: bool
    xcom_value: Any = None

    def __bool__(self) -> bool:
        return self.is_done


@dataclass(frozen=True)
class SensorOptions:
    poke_interval: float
    timeout: float
    mode: Literal["poke", "reschedule"]
    soft_fail: bool = False
    exponential_backoff: bool = False

    def serialized(self) -> dict[str, Any]:
        return {
            "poke_interval": self.poke_interval,
            "timeout": self.timeout,
            "mode": self.mode,
            "soft_fail": self.soft_fail,
            "exponential_backoff": self.exponential_backoff,
        }

    def wait_after(self, pokes: int) -> float:
        """Seconds to the next poke after `pokes` empty ones."""
        if not self.exponential_backoff:
            return self.poke_interval
        return float(self.poke_interval * 2 ** min(max(pokes - 1, 0), 30))


@dataclass(frozen=True)
class Waiting:
    """A reschedule-mode sensor's state between two pokes, kept on its TI (`waiting`):
    the try it belongs to, its first poke, and how many empty pokes so far."""

    try_number: int
    since: dt.datetime
    pokes: int

    def stored(self) -> dict[str, Any]:
        return {"try": self.try_number, "since": self.since.isoformat(), "pokes": self.pokes}

    @classmethod
    def of(cls, stored: Any, try_number: int, now: dt.datetime) -> Waiting:
        """The state stored for this try, or a fresh one (a first poke, a new try, or a
        value that does not parse: the timeout then counts from now)."""
        try:
            if stored["try"] == try_number:
                since = dt.datetime.fromisoformat(stored["since"])
                return cls(try_number, since, int(stored["pokes"]))
        except (TypeError, KeyError, ValueError):
            pass
        return cls(try_number, now, 0)


def _seconds(name: str, value: Any) -> float:
    seconds = value.total_seconds() if isinstance(value, dt.timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds <= 0:
        raise DagDefinitionError(f"sensor {name} must be a positive timedelta or number of seconds")
    return float(seconds)


def sensor_options(
    *,
    poke_interval: Any = 60.0,
    timeout: Any = 7 * 24 * 3600.0,
    mode: str = "poke",
    soft_fail: bool = False,
    exponential_backoff: bool = False,
) -> SensorOptions:
    """The options of `@task.sensor`, checked (DagDefinitionError for a bad one)."""
    if mode not in MODES:
        raise DagDefinitionError(f"sensor mode must be 'poke' or 'reschedule', got {mode!r}")
    return SensorOptions(
        poke_interval=_seconds("poke_interval", poke_interval),
        timeout=_seconds("timeout", timeout),
        mode="poke" if mode == "poke" else "reschedule",
        soft_fail=bool(soft_fail),
        exponential_backoff=bool(exponential_backoff),
    )


def poke_result(value: Any) -> tuple[bool, Any]:
    """(done, the task's result) of what a poke returned."""
    if isinstance(value, PokeReturnValue):
        return value.is_done, value.xcom_value
    return bool(value), None


def sense(
    options: SensorOptions,
    poke: Callable[[], Any],
    waiting: Waiting,
    *,
    clock: Callable[[], dt.datetime],
    stopped: Callable[[], BaseException | None] = lambda: None,
) -> Any:
    """Poke until done and return the task's result; in reschedule mode, one poke, then
    `Reschedule`. Past the timeout: `SensorTimeout`, or `Skip` with `soft_fail`.
    `stopped` gives the exception to raise when the try is stopped while it waits."""
    pokes = waiting.pokes
    deadline = waiting.since + dt.timedelta(seconds=options.timeout)
    while True:
        done, result = poke_result(poke())
        if done:
            return result
        pokes += 1
        now = clock()
        if now >= deadline:
            why = f"sensor timed out after {options.timeout:g} s ({pokes} pokes)"
            if options.soft_fail:
                raise Skip(why)
            raise SensorTimeout(why)
        at = min(now + dt.timedelta(seconds=options.wait_after(pokes)), deadline)
        if options.mode == "reschedule":
            raise Reschedule(at, Waiting(waiting.try_number, waiting.since, pokes))
        _sleep_until(at, clock, stopped)


def _sleep_until(
    at: dt.datetime, clock: Callable[[], dt.datetime], stopped: Callable[[], BaseException | None]
) -> None:
    while True:
        error = stopped()
        if error is not None:
            raise error
        left = (at - clock()).total_seconds()
        if left <= 0:
            return
        time.sleep(min(left, SLEEP_STEP))
