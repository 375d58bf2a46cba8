"""Timetables: when scheduled DAG runs are due (pure functions; croniter, UTC).

Airflow semantics: a run's ``logical_date`` is the START of its data interval and the run is
due at the END of it (``interval_end(logical_date) <= now``). Interval starts are the cron
points (evaluated in UTC) or ``start_date + k * delta`` for a timedelta schedule. Every
datetime in and out is timezone-aware UTC; a naive one is a ``ValueError``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from datetime import UTC, datetime, timedelta
from typing import Any

from croniter import croniter

from sluice.scheduler.core.run_dates import interval_end
from sluice.tasks.dag import CRON_PRESETS

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_TICK = timedelta(microseconds=1)


def _utc(dt: datetime, name: str = "datetime") -> datetime:
    if dt.tzinfo is None or dt.utcoffset() is None:
        raise ValueError(f"{name} {dt.isoformat()} is naive; timetables need aware datetimes")
    return dt.astimezone(UTC)


class Timetable(ABC):
    """The sequence of interval starts of a schedule; each interval ends at the next start."""

    @abstractmethod
    def next_interval_start_after(self, dt: datetime) -> datetime:
        """The first interval start strictly after ``dt``."""

    @abstractmethod
    def latest_interval_start_at_or_before(self, dt: datetime) -> datetime:
        """The last interval start at or before ``dt``."""

    def interval_end(self, start: datetime) -> datetime:
        """The end of the interval starting at ``start`` (the next interval start)."""
        return self.next_interval_start_after(start)

    def align_up(self, dt: datetime) -> datetime:
        """``dt`` if it is an interval start, else the next one."""
        floor = self.latest_interval_start_at_or_before(dt)
        return floor if floor == _utc(dt) else self.next_interval_start_after(dt)

    def latest_complete_interval_start(self, now: datetime) -> datetime:
        """The start of the latest interval whose end is at or before ``now``."""
        end = self.latest_interval_start_at_or_before(now)
        return self.latest_interval_start_at_or_before(end - _TICK)


class CronTimetable(Timetable):
    """Intervals between consecutive points of a cron expression, in UTC."""

    def __init__(self, expression: str) -> None:
        cron = CRON_PRESETS.get(expression, expression)
        if expression.startswith("@") and expression not in CRON_PRESETS:
            raise ValueError(f"unknown schedule preset {expression!r}")
        if not croniter.is_valid(cron):
            raise ValueError(f"invalid cron expression {expression!r}")
        self.expression = expression
        self.cron = cron

    def __repr__(self) -> str:
        return f"CronTimetable({self.expression!r})"

    def next_interval_start_after(self, dt: datetime) -> datetime:
        result: datetime = croniter(self.cron, _utc(dt)).get_next(datetime)
        return result.astimezone(UTC)

    def latest_interval_start_at_or_before(self, dt: datetime) -> datetime:
        dt = _utc(dt)
        prev: datetime = croniter(self.cron, dt).get_prev(datetime).astimezone(UTC)
        following = self.next_interval_start_after(prev)
        return following if following <= dt else prev


class DeltaTimetable(Timetable):
    """Fixed-length intervals ``anchor + k * delta`` (the anchor is the DAG's start_date)."""

    def __init__(self, delta: timedelta, anchor: datetime | None = None) -> None:
        if delta <= timedelta(0):
            raise ValueError(f"schedule interval must be positive, got {delta}")
        self.delta = delta
        self.anchor = _utc(anchor, "start_date") if anchor is not None else _EPOCH

    def __repr__(self) -> str:
        return f"DeltaTimetable({self.delta!r}, anchor={self.anchor.isoformat()})"

    def latest_interval_start_at_or_before(self, dt: datetime) -> datetime:
        return self.anchor + ((_utc(dt) - self.anchor) // self.delta) * self.delta

    def next_interval_start_after(self, dt: datetime) -> datetime:
        return self.latest_interval_start_at_or_before(dt) + self.delta

    def interval_end(self, start: datetime) -> datetime:
        """``start + delta`` (right even when ``start`` is off this timetable's anchor)."""
        return _utc(start) + self.delta


def parse_schedule(
    serialized_schedule: Any, start_date: datetime | None = None
) -> Timetable | None:
    """The timetable of a serialized schedule (None: no runs by time: manual runs only, or
    runs made by asset events or a watch, ``{"assets": ...}`` or ``{"watch": ...}``).

    ``start_date`` anchors a timedelta schedule (default: the Unix epoch).
    """
    if serialized_schedule is None or is_event_schedule(serialized_schedule):
        return None
    if isinstance(serialized_schedule, str):
        return CronTimetable(serialized_schedule)
    if isinstance(serialized_schedule, timedelta):
        return DeltaTimetable(serialized_schedule, start_date)
    if isinstance(serialized_schedule, dict) and set(serialized_schedule) == {"seconds"}:
        return DeltaTimetable(timedelta(seconds=float(serialized_schedule["seconds"])), start_date)
    raise ValueError(f"unrecognised schedule {serialized_schedule!r}")


def is_event_schedule(serialized_schedule: Any) -> bool:
    """Whether a serialized schedule makes runs from events: assets or a watch."""
    return isinstance(serialized_schedule, dict) and bool(
        {"assets", "watch"} & set(serialized_schedule)
    )


def _spec_date(dag_spec: dict[str, Any], key: str) -> datetime | None:
    value = dag_spec.get(key)
    if value is None:
        return None
    return _utc(datetime.fromisoformat(value) if isinstance(value, str) else value, key)


def timetable_for(dag_spec: dict[str, Any]) -> Timetable | None:
    """The timetable of a serialized DAG (anchored at its start_date)."""
    return parse_schedule(dag_spec.get("schedule"), _spec_date(dag_spec, "start_date"))


def next_dagrun_after(
    dag_spec: dict[str, Any], last_logical_date: datetime | None, now: datetime
) -> datetime | None:
    """The logical date of the next scheduled run to create, or None if there is none.

    It may lie in the future: create the run once ``interval_end(logical_date) <= now``.
    The first run starts at start_date (aligned up); with ``catchup`` False the next run is
    moved forward to the latest complete interval (never before start_date). A logical date
    after end_date means no run.
    """
    timetable = timetable_for(dag_spec)
    if timetable is None:
        return None
    start = _spec_date(dag_spec, "start_date")
    if start is None:
        raise ValueError(f"DAG {dag_spec.get('dag_id')!r} has a schedule but no start_date")
    earliest = timetable.align_up(start)
    if last_logical_date is None:
        candidate = earliest
    else:
        candidate = max(timetable.next_interval_start_after(last_logical_date), earliest)
    if not dag_spec.get("catchup", False):
        candidate = max(candidate, timetable.latest_complete_interval_start(_utc(now, "now")))
    end = _spec_date(dag_spec, "end_date")
    if end is not None and candidate > end:
        return None
    return candidate


def logical_dates_between(
    dag_spec: dict[str, Any], start: datetime, end: datetime
) -> list[datetime]:
    """Every interval start in [start, end] (a backfill's runs); ValueError for manual DAGs.

    The DAG's own start_date/end_date are not applied: the caller chose the range.
    """
    timetable = timetable_for(dag_spec)
    if timetable is None:
        raise ValueError(f"DAG {dag_spec.get('dag_id')!r} has no schedule: nothing to backfill")
    end = _utc(end, "end")
    dates: list[datetime] = []
    current = timetable.align_up(_utc(start, "start"))
    while current <= end:
        dates.append(current)
        current = timetable.next_interval_start_after(current)
    return dates


def data_interval(dag_spec: dict[str, Any], logical_date: datetime) -> tuple[datetime, datetime]:
    """(start, end) of the scheduled run at ``logical_date`` (``core.run_dates``, which
    the worker's context uses too); a DAG without a time schedule's interval is empty."""
    logical_date = _utc(logical_date, "logical_date")
    return logical_date, interval_end(dag_spec.get("schedule"), logical_date) or logical_date
