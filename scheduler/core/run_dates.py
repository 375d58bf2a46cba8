"""The dates a task's context gives of its run, by Airflow's names: `ds`, the day of the
logical date (`YYYY-MM-DD`, UTC), and `data_interval_start`/`data_interval_end`, the
interval of the schedule that the run covers.

A run the schedule made (scheduled, or a backfill's) covers the interval that starts at
its logical date and ends at the schedule's next point; any other run (manual, made by
assets or a watch, or a DAG without a time schedule) covers no interval: both ends are
its logical date. Pure functions of the serialized DAG, shared by the worker (which
builds the context) and `scheduling.timetables.data_interval`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from croniter import croniter

from sluice.scheduler.core.states import RunType
from sluice.tasks.dag import CRON_PRESETS

BY_SCHEDULE = frozenset({RunType.SCHEDULED, RunType.BACKFILL})
"""The runs that cover an interval of their DAG's schedule."""


def interval_end(schedule: Any, start: dt.datetime) -> dt.datetime | None:
    """The end of the interval of a serialized `schedule` that starts at `start` (aware):
    the cron expression's (or preset's) next point after it, or `start` plus a timedelta
    schedule's `{"seconds": s}`; None for a schedule not by time (none, assets, a watch)."""
    start = start.astimezone(dt.UTC)
    if isinstance(schedule, str):
        following: dt.datetime = croniter(CRON_PRESETS.get(schedule, schedule), start).get_next(
            dt.datetime
        )
        return following.astimezone(dt.UTC)
    if isinstance(schedule, dict) and set(schedule) == {"seconds"}:
        return start + dt.timedelta(seconds=float(schedule["seconds"]))
    return None


def run_dates(
    dag_spec: Mapping[str, Any], run_type: str, logical_date: dt.datetime
) -> dict[str, str]:
    """`ds`, `data_interval_start` and `data_interval_end` of a run of the serialized DAG
    `dag_spec`, as ISO 8601 text (as the context's `logical_date` is)."""
    start = logical_date.astimezone(dt.UTC)
    end = interval_end(dag_spec.get("schedule"), start) if run_type in BY_SCHEDULE else None
    return {
        "ds": start.date().isoformat(),
        "data_interval_start": start.isoformat(),
        "data_interval_end": (end or start).isoformat(),
    }
