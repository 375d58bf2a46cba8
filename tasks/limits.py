"""Limits across runs and DAGs: `sluice.Concurrency` (slots per key) and
`sluice.RateLimit` (a shared token bucket).

`Concurrency(name, key, limit)`: at most `limit` TIs of tasks naming `name` whose key
is the same are queued or running at once, across every run, DAG and scheduler. `key`
is user code (`key(context) -> str | int`): a worker computes it when it claims the
task's first try, before the task's code runs (`concurrency_key`); never a scheduler.

`RateLimit(name, limit, per)`: a token bucket of `limit` tokens, refilled at `limit`
per `per`; each try of a task naming it takes one token when it is queued.

Both are checked when the DAG is defined (one line, `DagDefinitionError`); a computed
key is checked when it is computed (`ValueError`, which fails the try).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sluice.tasks.control_chars import first_control_char
from sluice.tasks.errors import DagDefinitionError

NAME_MAX = 250
"""Longest name of a limit, and longest key (characters): both are indexed columns."""
KEY_MAX = 250
LIMIT_MAX = 1_000_000
PER_MAX = timedelta(days=1)
"""Longest refill period of a rate limit."""


def _check_name(kind: str, name: object) -> str:
    if not isinstance(name, str) or not name or name != name.strip():
        raise DagDefinitionError(f"{kind} name must be non-empty text without end spaces")
    if len(name) > NAME_MAX:
        raise DagDefinitionError(f"{kind} name must be at most {NAME_MAX} characters")
    if first_control_char(name) is not None:
        raise DagDefinitionError(f"{kind} name must not contain control characters")
    return name


def _check_limit(kind: str, limit: object) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= LIMIT_MAX:
        raise DagDefinitionError(
            f"{kind} limit must be an int from 1 to {LIMIT_MAX}, got {limit!r}"
        )
    return limit


@dataclass(frozen=True)
class Concurrency:
    """At most `limit` TIs with the same (`name`, `key(context)`) queued or running."""

    name: str
    key: Callable[[Mapping[str, Any]], Any]
    limit: int = 1

    def __post_init__(self) -> None:
        _check_name("a Concurrency", self.name)
        if not callable(self.key):
            raise DagDefinitionError(f"Concurrency {self.name!r}: key must be a callable")
        _check_limit(f"Concurrency {self.name!r}:", self.limit)

    def serialized(self) -> dict[str, Any]:
        return {"name": self.name, "limit": self.limit}


def concurrency_key(concurrency: Concurrency, context: Mapping[str, Any]) -> str:
    """The key of a try (`concurrency.key(context)`, user code): text or an int, as text
    of 1 to KEY_MAX characters with no control character; ValueError (one line) else."""
    value = concurrency.key(context)
    if isinstance(value, bool) or not isinstance(value, str | int):
        kind = type(value).__name__
        raise ValueError(
            f"Concurrency {concurrency.name!r}: key must be text or an int, got {kind}"
        )
    key = str(value)
    if not 1 <= len(key) <= KEY_MAX:
        raise ValueError(
            f"Concurrency {concurrency.name!r}: key must be 1 to {KEY_MAX} characters, "
            f"got {len(key)}"
        )
    if first_control_char(key) is not None:
        raise ValueError(
            f"Concurrency {concurrency.name!r}: key must not contain control characters"
        )
    return key


@dataclass(frozen=True)
class RateLimit:
    """A token bucket shared by every task naming `name`: `limit` tokens at most (the
    burst), refilled at `limit` per `per`; a try takes one when it is queued."""

    name: str
    limit: int
    per: timedelta | float = timedelta(seconds=1)
    """A timedelta, or a number of seconds (made a timedelta)."""

    def __post_init__(self) -> None:
        _check_name("a RateLimit", self.name)
        _check_limit(f"RateLimit {self.name!r}:", self.limit)
        per = self.per
        if isinstance(per, int | float) and not isinstance(per, bool):
            seconds = float(per)
            fits = 0 < seconds <= PER_MAX.total_seconds()  # False for NaN too
            object.__setattr__(self, "per", timedelta(seconds=seconds) if fits else None)
        if not isinstance(self.per, timedelta) or not timedelta(0) < self.per <= PER_MAX:
            raise DagDefinitionError(
                f"RateLimit {self.name!r}: per must be a timedelta above 0 and at most 1 day"
            )

    @property
    def period(self) -> timedelta:
        """`per` as a timedelta."""
        assert isinstance(self.per, timedelta)  # __post_init__ made it one
        return self.per

    def serialized(self) -> dict[str, Any]:
        return {"name": self.name, "limit": self.limit, "per": self.period.total_seconds()}


def check_concurrency(value: object) -> Concurrency | None:
    if value is not None and not isinstance(value, Concurrency):
        raise DagDefinitionError(f"concurrency must be a sluice.Concurrency, got {value!r}")
    return value


def check_rate_limit(value: object) -> RateLimit | None:
    if value is not None and not isinstance(value, RateLimit):
        raise DagDefinitionError(f"rate_limit must be a sluice.RateLimit, got {value!r}")
    return value
