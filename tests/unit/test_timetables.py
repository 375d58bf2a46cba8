"""Timetables: cron, presets, timedelta, catchup on/off, end_date, backfill dates, and
the dates a task's context gives of its run (`core.run_dates`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from sluice.scheduler.core.run_dates import interval_end, run_dates
from sluice.scheduler.core.states import RunType
from sluice.scheduler.scheduling.timetables import (
    CronTimetable,
    DeltaTimetable,
    data_interval,
    logical_dates_between,
    next_dagrun_after,
    parse_schedule,
    timetable_for,
)


def d(day: int, hour: int = 0, minute: int = 0, month: int = 1) -> datetime:
    return datetime(2026, month, day, hour, minute, tzinfo=UTC)


def spec(
    schedule: Any, start: datetime | None = None, catchup: bool = True, end: datetime | None = None
) -> dict[str, Any]:
    return {
        "dag_id": "t",
        "schedule": schedule,
        "start_date": (start or d(1)).isoformat(),
        "end_date": end.isoformat() if end else None,
        "catchup": catchup,
    }


def test_parse_schedule() -> None:
    assert parse_schedule(None) is None
    assert isinstance(parse_schedule("@daily"), CronTimetable)
    assert isinstance(parse_schedule("*/5 * * * *"), CronTimetable)
    delta = parse_schedule({"seconds": 3600.0}, d(1, 0, 30))
    assert isinstance(delta, DeltaTimetable) and delta.delta == timedelta(hours=1)
    for bad in ["@once", "not cron", {"minutes": 1}, 12]:
        with pytest.raises(ValueError):
            parse_schedule(bad)


def test_cron_intervals() -> None:
    daily = CronTimetable("@daily")
    assert daily.next_interval_start_after(d(1)) == d(2)  # strictly after
    assert daily.next_interval_start_after(d(1, 12)) == d(2)
    assert daily.latest_interval_start_at_or_before(d(1)) == d(1)
    assert daily.latest_interval_start_at_or_before(d(1, 23, 59)) == d(1)
    assert daily.interval_end(d(5)) == d(6)
    every_6h = CronTimetable("0 */6 * * *")
    assert every_6h.next_interval_start_after(d(1, 7)) == d(1, 12)
    plus2 = timezone(timedelta(hours=2))
    assert daily.next_interval_start_after(datetime(2026, 1, 1, 1, tzinfo=plus2)) == d(1)
    with pytest.raises(ValueError, match="naive"):
        daily.next_interval_start_after(datetime(2026, 1, 1))  # noqa: DTZ001


@pytest.mark.parametrize(
    ("preset", "after", "expected"),
    [
        ("@hourly", d(1, 10, 30), d(1, 11)),
        ("@daily", d(1, 10), d(2)),
        ("@midnight", d(1, 10), d(2)),
        ("@weekly", d(1), d(4)),  # 2026-01-01 is a Thursday; weeks start on Sunday
        ("@monthly", d(1), d(1, month=2)),
        ("@yearly", d(1), datetime(2027, 1, 1, tzinfo=UTC)),
        ("@annually", d(1), datetime(2027, 1, 1, tzinfo=UTC)),
    ],
)
def test_presets(preset: str, after: datetime, expected: datetime) -> None:
    timetable = parse_schedule(preset)
    assert timetable is not None
    assert timetable.next_interval_start_after(after) == expected


def test_timedelta_aligned_to_start_date() -> None:
    hourly = DeltaTimetable(timedelta(hours=1), anchor=d(1, 0, 30))
    assert hourly.next_interval_start_after(d(1, 2)) == d(1, 2, 30)
    assert hourly.next_interval_start_after(d(1, 2, 30)) == d(1, 3, 30)
    assert hourly.latest_interval_start_at_or_before(d(1, 2, 30)) == d(1, 2, 30)
    assert hourly.interval_end(d(1, 2, 30)) == d(1, 3, 30)
    assert hourly.next_interval_start_after(d(1)) == d(1, 0, 30)  # before the anchor too


def test_first_run_with_catchup_starts_at_aligned_start_date() -> None:
    assert next_dagrun_after(spec("@daily"), None, d(20)) == d(1)
    assert next_dagrun_after(spec("@daily", start=d(1, 5)), None, d(20)) == d(2)
    assert next_dagrun_after(spec("@daily"), d(3), d(20)) == d(4)
    hourly = spec({"seconds": 3600.0}, start=d(1, 0, 30))
    assert next_dagrun_after(hourly, None, d(20)) == d(1, 0, 30)
    assert next_dagrun_after(hourly, d(1, 0, 30), d(20)) == d(1, 1, 30)


def test_no_catchup_skips_to_latest_complete_interval() -> None:
    daily = spec("@daily", catchup=False)
    now = d(10, 12)
    assert next_dagrun_after(daily, None, now) == d(9)  # [9th, 10th) is complete
    assert next_dagrun_after(daily, d(2), now) == d(9)
    assert next_dagrun_after(daily, d(9), now) == d(10)  # due at the 11th
    assert next_dagrun_after(daily, None, d(10)) == d(9)  # an interval ending exactly now
    # never before start_date, even when nothing is complete yet
    assert next_dagrun_after(daily, None, datetime(2025, 12, 1, tzinfo=UTC)) == d(1)
    hourly = spec({"seconds": 3600.0}, start=d(1, 0, 30), catchup=False)
    assert next_dagrun_after(hourly, None, d(1, 5, 45)) == d(1, 4, 30)


def test_end_date_and_manual() -> None:
    ending = spec("@daily", end=d(3))
    assert next_dagrun_after(ending, d(2), d(20)) == d(3)
    assert next_dagrun_after(ending, d(3), d(20)) is None
    assert next_dagrun_after(spec("@daily", catchup=False, end=d(3)), None, d(20)) is None
    assert next_dagrun_after(spec(None), None, d(20)) is None


def test_backfill_dates() -> None:
    daily = spec("@daily")
    assert logical_dates_between(daily, d(1), d(3)) == [d(1), d(2), d(3)]
    assert logical_dates_between(daily, d(1, 12), d(3, 12)) == [d(2), d(3)]
    assert logical_dates_between(daily, d(3), d(1)) == []
    hourly = spec({"seconds": 3600.0}, start=d(1, 0, 30))
    assert logical_dates_between(hourly, d(1, 1), d(1, 3, 30)) == [
        d(1, 1, 30),
        d(1, 2, 30),
        d(1, 3, 30),
    ]
    with pytest.raises(ValueError, match="no schedule"):
        logical_dates_between(spec(None), d(1), d(2))
    with pytest.raises(ValueError, match="naive"):
        logical_dates_between(daily, datetime(2026, 1, 1), d(2))  # noqa: DTZ001


def test_data_interval() -> None:
    assert data_interval(spec("@daily"), d(4)) == (d(4), d(5))
    assert data_interval(spec(None), d(4)) == (d(4), d(4))
    assert data_interval(spec({"assets": {"uri": "mem://a"}}), d(4)) == (d(4), d(4))


@pytest.mark.parametrize(
    "schedule", ["@daily", "@hourly", "*/5 * * * *", "30 2 * * 1", {"seconds": 5400.0}]
)
def test_the_contexts_interval_ends_where_the_timetables_does(schedule: Any) -> None:
    timetable = timetable_for(spec(schedule))
    assert timetable is not None
    for start in (d(4), d(4, 2, 30), timetable.align_up(d(7, 13, 1))):
        assert interval_end(schedule, start) == timetable.interval_end(start)


def test_run_dates_by_run_type() -> None:
    at = datetime(2026, 1, 4, 23, 30, tzinfo=timezone(timedelta(hours=-2)))  # 5 Jan in UTC
    daily = spec("@daily")
    for run_type in (RunType.SCHEDULED, RunType.BACKFILL):
        assert run_dates(daily, run_type, d(4)) == {
            "ds": "2026-01-04",
            "data_interval_start": "2026-01-04T00:00:00+00:00",
            "data_interval_end": "2026-01-05T00:00:00+00:00",
        }
    for run_type in (RunType.MANUAL, RunType.ASSET_TRIGGERED, RunType.WATCH):
        assert run_dates(daily, run_type, at) == {
            "ds": "2026-01-05",
            "data_interval_start": "2026-01-05T01:30:00+00:00",
            "data_interval_end": "2026-01-05T01:30:00+00:00",
        }
    assert run_dates(spec(None), RunType.SCHEDULED, d(4))["data_interval_end"] == (
        "2026-01-04T00:00:00+00:00"
    )
