"""`cli.task_lines.line_for`: the words of the line `sluice standalone` prints for a TI."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace
from typing import Any

from sluice.scheduler.cli.task_lines import line_for
from sluice.scheduler.core.states import TI

START = dt.datetime(2026, 3, 1, 12, 0, 0, tzinfo=dt.UTC)


def row(state: TI, **values: Any) -> SimpleNamespace:
    """A TI as `core.queries.task_changes` reads it: it ran from START for 0.05 s."""
    found = {
        "task_id": "sense",
        "map_index": -1,
        "state": state,
        "try_number": 1,
        "max_tries": 2,
        "start_date": START,
        "end_date": START + dt.timedelta(seconds=0.05),
        "next_retry_at": None,
        "error": None,
    }
    return SimpleNamespace(**(found | values))


def test_a_retry_says_the_try_and_when_it_retries() -> None:
    later = row(TI.UP_FOR_RETRY, next_retry_at=START + dt.timedelta(seconds=5.05), error="E: x")
    assert (
        line_for(later) == "sense  up_for_retry  0.05s  try 1 of 2 failed, retrying in 5.00s: E: x"
    )


def test_a_sensor_between_pokes_says_when_it_pokes_again() -> None:
    soon = row(TI.UP_FOR_RESCHEDULE, next_retry_at=START + dt.timedelta(seconds=30))
    assert line_for(soon, 6) == "sense   up_for_reschedule  0.05s  poke again at 12:00:30"
    tomorrow = row(TI.UP_FOR_RESCHEDULE, next_retry_at=START + dt.timedelta(days=1))
    assert line_for(tomorrow).endswith("poke again at 2026-03-02 12:00:00")
    unknown = row(TI.UP_FOR_RESCHEDULE, end_date=None)
    assert line_for(unknown) == "sense  up_for_reschedule"
