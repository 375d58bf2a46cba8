"""The typed answers of the API, as frozen dataclasses.

Each `from_json` reads the fields it knows and ignores the others, so a newer server
that adds fields still works. Times are timezone-aware `datetime`s (the API answers
ISO 8601 in UTC). States are plain strings (`"success"`, `"up_for_retry"`), so a state
a newer server adds does not break an older client; `RUN_TERMINAL` names the run states
`Client.wait` stops at.

A field missing or of the wrong type raises `KeyError`, `TypeError` or `ValueError`; the
clients turn those into `InvalidResponse` (`reading.decode`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

RUN_TERMINAL = frozenset({"success", "failed"})
"""The run states that do not change unless someone clears or marks the run."""


@dataclass(frozen=True)
class Note:
    """A note left on a run or a task instance."""

    note: str
    who: str
    at: dt.datetime

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Note:
        return cls(note=_str(data, "note"), who=_str(data, "who"), at=_time(data, "at"))


@dataclass(frozen=True)
class VersionRef:
    """The version of a git bundle's DAG a run follows: its commit and subject."""

    sha: str
    short: str
    subject: str

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> VersionRef:
        return cls(sha=_str(data, "sha"), short=_str(data, "short"), subject=_str(data, "subject"))


@dataclass(frozen=True)
class Run:
    """A DAG run. `conf` and `note` are None in a list of runs (`Client.runs`): reading
    one run (`Client.run`, `trigger`, `wait`, `cancel`) gives them."""

    dag_id: str
    run_id: str
    state: str
    run_type: str
    logical_date: dt.datetime
    queued_at: dt.datetime | None = None
    start_date: dt.datetime | None = None
    end_date: dt.datetime | None = None
    conf: dict[str, Any] | None = None
    note: Note | None = None
    trace_id: str | None = None
    trace_url: str | None = None
    bundle_version: str | None = None
    version: VersionRef | None = None

    @property
    def finished(self) -> bool:
        """The run is in a terminal state (`RUN_TERMINAL`)."""
        return self.state in RUN_TERMINAL

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Run:
        conf = data.get("conf")
        if conf is not None and not isinstance(conf, dict):
            raise TypeError(f"conf is a {type(conf).__name__}, not an object")
        note, version = data.get("note"), data.get("version")
        return cls(
            dag_id=_str(data, "dag_id"),
            run_id=_str(data, "run_id"),
            state=_str(data, "state"),
            run_type=_str(data, "run_type"),
            logical_date=_time(data, "logical_date"),
            queued_at=_opt_time(data, "queued_at"),
            start_date=_opt_time(data, "start_date"),
            end_date=_opt_time(data, "end_date"),
            conf=conf,
            note=Note.from_json(note) if note is not None else None,
            trace_id=_opt_str(data, "trace_id"),
            trace_url=_opt_str(data, "trace_url"),
            bundle_version=_opt_str(data, "bundle_version"),
            version=VersionRef.from_json(version) if version is not None else None,
        )


@dataclass(frozen=True)
class TaskInstance:
    """One task instance of a run (a mapped task has one per `map_index`)."""

    task_id: str
    state: str
    try_number: int
    map_index: int | None = None
    max_tries: int = 0
    queue: str | None = None
    pool: str | None = None
    hostname: str | None = None
    attempt_id: str | None = None
    scheduled_at: dt.datetime | None = None
    queued_at: dt.datetime | None = None
    start_date: dt.datetime | None = None
    end_date: dt.datetime | None = None
    next_retry_at: dt.datetime | None = None
    error: str | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TaskInstance:
        return cls(
            task_id=_str(data, "task_id"),
            state=_str(data, "state"),
            try_number=_int(data, "try_number"),
            map_index=_opt_int(data, "map_index"),
            max_tries=_opt_int(data, "max_tries") or 0,
            queue=_opt_str(data, "queue"),
            pool=_opt_str(data, "pool"),
            hostname=_opt_str(data, "hostname"),
            attempt_id=_opt_str(data, "attempt_id"),
            scheduled_at=_opt_time(data, "scheduled_at"),
            queued_at=_opt_time(data, "queued_at"),
            start_date=_opt_time(data, "start_date"),
            end_date=_opt_time(data, "end_date"),
            next_retry_at=_opt_time(data, "next_retry_at"),
            error=_opt_str(data, "error"),
        )


@dataclass(frozen=True)
class TaskLog:
    """What one try of a task printed and logged (`content`: empty while nothing is
    stored; `dropped_lines`: older lines dropped to keep the per-try cap)."""

    dag_id: str
    run_id: str
    task_id: str
    try_number: int
    content: str
    dropped_lines: int = 0
    attempt_id: str | None = None
    hostname: str | None = None
    started_at: dt.datetime | None = None
    updated_at: dt.datetime | None = None
    finished_at: dt.datetime | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TaskLog:
        return cls(
            dag_id=_str(data, "dag_id"),
            run_id=_str(data, "run_id"),
            task_id=_str(data, "task_id"),
            try_number=_int(data, "try_number"),
            content=_str(data, "content"),
            dropped_lines=_opt_int(data, "dropped_lines") or 0,
            attempt_id=_opt_str(data, "attempt_id"),
            hostname=_opt_str(data, "hostname"),
            started_at=_opt_time(data, "started_at"),
            updated_at=_opt_time(data, "updated_at"),
            finished_at=_opt_time(data, "finished_at"),
        )


@dataclass(frozen=True)
class ClearResult:
    """How many task instances a clear reset, and the run's state after it."""

    cleared: int
    run_state: str

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ClearResult:
        return cls(cleared=_int(data, "cleared"), run_state=_str(data, "run_state"))


@dataclass(frozen=True)
class MarkResult:
    """The task ids a mark set, the tries it stopped, and the run's state after it."""

    marked: tuple[str, ...]
    stopped: int
    run_state: str

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> MarkResult:
        marked = data["marked"]
        if not isinstance(marked, list) or not all(isinstance(m, str) for m in marked):
            raise TypeError("marked is not a list of task ids")
        return cls(
            marked=tuple(marked), stopped=_int(data, "stopped"), run_state=_str(data, "run_state")
        )


@dataclass(frozen=True)
class EventResult:
    """How many deferred task instances an event resumed."""

    resumed: int

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EventResult:
        return cls(resumed=_int(data, "resumed"))


# -- reading one field ---------------------------------------------------------------------


def _str(data: Mapping[str, Any], key: str) -> str:
    value = data[key]
    if not isinstance(value, str):
        raise TypeError(f"{key} is not a string")
    return value


def _opt_str(data: Mapping[str, Any], key: str) -> str | None:
    return None if data.get(key) is None else _str(data, key)


def _int(data: Mapping[str, Any], key: str) -> int:
    value = data[key]
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{key} is not an integer")
    return value


def _opt_int(data: Mapping[str, Any], key: str) -> int | None:
    return None if data.get(key) is None else _int(data, key)


def _time(data: Mapping[str, Any], key: str) -> dt.datetime:
    """An ISO 8601 time; one without a zone is UTC (as the API reads them)."""
    parsed = dt.datetime.fromisoformat(_str(data, key))
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=dt.UTC)


def _opt_time(data: Mapping[str, Any], key: str) -> dt.datetime | None:
    return None if data.get(key) is None else _time(data, key)
