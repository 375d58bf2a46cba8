"""Times and durations as tables show them: short, exact to the second, never cut.

Every time is shown in UTC (as stored, and as run ids and `--json` give them). A time on
the same UTC day as `now` is `HH:MM:SS`; any other (older, or a next run due tomorrow)
is `YYYY-MM-DD HH:MM:SS`. A duration is the largest two or three units that matter:
`0.27s`, `12.3s`, `4m05s`, `1h02m03s`, `3d04h05m`.
"""

from __future__ import annotations

import datetime as dt

TIMES_NOTE = "times in UTC"
"""The line under a table that shows times."""


def when(value: dt.datetime | None, now: dt.datetime) -> str:
    """`value` for a table cell: `HH:MM:SS` on now's UTC day, else the date and the time;
    empty for None."""
    if value is None:
        return ""
    at = value.astimezone(dt.UTC)
    if at.date() == now.astimezone(dt.UTC).date():
        return at.strftime("%H:%M:%S")
    return at.strftime("%Y-%m-%d %H:%M:%S")


def seconds_text(seconds: float) -> str:
    """A duration in seconds (>= 0) as its two or three largest units."""
    seconds = max(seconds, 0.0)
    if seconds < 10:
        return f"{seconds:.2f}s"
    if seconds < 60:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    days, rest = divmod(whole, 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h{minutes:02d}m"
    if hours:
        return f"{hours}h{minutes:02d}m{secs:02d}s"
    return f"{minutes}m{secs:02d}s"


def duration(start: dt.datetime | None, end: dt.datetime | None, now: dt.datetime) -> float | None:
    """Seconds from `start` to `end` (to `now` while unfinished); None before the start."""
    if start is None:
        return None
    return max(((end or now) - start).total_seconds(), 0.0)


def duration_text(start: dt.datetime | None, end: dt.datetime | None, now: dt.datetime) -> str:
    """The duration cell: start to end, or to now while it goes on (the state column says
    which); empty before the start."""
    seconds = duration(start, end, now)
    return "" if seconds is None else seconds_text(seconds)
