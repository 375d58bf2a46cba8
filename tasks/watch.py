"""Watched sources: a DAG whose runs come from a function that looks at the world, with
run keys (as Dagster's sensors with `run_key`).

`DAG(schedule=Watch(fn, interval=timedelta(seconds=30)))`: every `interval` a triggerer
calls `fn(context)` in a subprocess of its own (user code: never in a scheduler's loop,
at most `timeout` seconds). `fn` yields (or returns a list of) `RunRequest(run_key,
conf={...})`. A run key makes at most one run of the DAG, ever: its run id is
`watch__<key>` (`run_id_of`), and the keys seen are kept, so a watch that yields the same
key every time, several triggerers and restarts make that run once.

The cursor: `context["cursor"]` is the string the last evaluation set (None at first);
call `context["set_cursor"](text)` to set the one the next evaluation gets. It is saved
with the runs the evaluation made, in one transaction: an evaluation that raises or
hangs changes neither (its error is the DAG's watch error until one succeeds).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from sluice.tasks.errors import DagDefinitionError
from sluice.tasks.run_ids import bounded_run_id

RUN_KEY_MAX = 1000
"""Longest run key, in bytes of UTF-8 (it is a key of an index)."""
CURSOR_MAX = 10_000
"""Longest cursor, in characters."""
REQUESTS_MAX = 1000
"""Most run requests one evaluation may make (the rest is an error)."""
TIMEOUT_MAX = 600.0
"""Longest time one evaluation may take, in seconds."""
_PREFIX = "watch__"


@dataclass(frozen=True)
class RunRequest:
    """A run the watch asks for: at most one per `run_key`, ever; `conf` its run's conf."""

    run_key: str
    conf: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        key = self.run_key
        if not isinstance(key, str) or not 0 < len(key.encode("utf-8", "replace")) <= RUN_KEY_MAX:
            raise ValueError(f"a run_key must be text of 1 to {RUN_KEY_MAX} bytes")
        if any(ord(c) < 0x20 or ord(c) == 0x7F or 0xD800 <= ord(c) < 0xE000 for c in key):
            raise ValueError("a run_key must not contain control characters")
        if not isinstance(self.conf, dict):
            raise ValueError(f"a RunRequest's conf must be a dict, got {type(self.conf).__name__}")


def run_id_of(run_key: str) -> str:
    """The run id of `run_key`'s run: `watch__<key>`, bounded as every run id Sluice
    derives (`run_ids.bounded_run_id`: characters outside letters, digits and
    `_ . : + ~ -` replaced by `_`, and a hash of the key at the end of an id changed so
    or cut), so two keys never share a run id."""
    return bounded_run_id(_PREFIX + run_key)


class Watch:
    """A DAG's schedule that calls `fn(context)` every `interval` (see the module)."""

    def __init__(
        self,
        fn: Callable[[dict[str, Any]], Any],
        interval: timedelta | float = timedelta(seconds=30),
        timeout: timedelta | float = timedelta(seconds=60),
    ) -> None:
        if not callable(fn):
            raise DagDefinitionError(f"Watch takes a function, got {fn!r}")
        self.fn = fn
        self.interval = _seconds("interval", interval)
        self.timeout = _seconds("timeout", timeout)
        if self.timeout > TIMEOUT_MAX:
            raise DagDefinitionError(f"Watch's timeout must be at most {TIMEOUT_MAX:g} seconds")

    def __repr__(self) -> str:
        return f"Watch({getattr(self.fn, '__name__', self.fn)!r}, interval={self.interval:g}s)"

    def json(self) -> dict[str, Any]:
        name = getattr(self.fn, "__qualname__", None) or getattr(self.fn, "__name__", "?")
        return {"function": str(name), "interval": self.interval, "timeout": self.timeout}


def _seconds(name: str, value: object) -> float:
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds <= 0:
        raise DagDefinitionError(f"Watch's {name} must be a positive timedelta or seconds")
    if seconds > 7 * 24 * 3600:
        raise DagDefinitionError(f"Watch's {name} must be at most a week")
    return float(seconds)
