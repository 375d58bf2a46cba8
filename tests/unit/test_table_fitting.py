"""Tables fitted to a terminal's width: kept cells whole, lines within the width, and the
times and durations they show."""

from __future__ import annotations

import datetime as dt
import io
from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from sluice.scheduler.cli.tables import Col, print_table
from sluice.scheduler.cli.timefmt import duration_text, seconds_text, when

NOW = dt.datetime(2026, 12, 1, 22, 33, 38, tzinfo=dt.UTC)
STATES = ["success", "failed", "upstream_failed", "up_for_retry", "queued", "scheduled"]
COLUMNS = (
    Col("task_id"),
    Col("state", keep=True),
    Col("queue"),
    Col("start", keep=True),
    Col("duration", keep=True, right=True),
)


def printed(rows: Sequence[Sequence[str]], width: int, notes: tuple[str, ...] = ()) -> str:
    out = io.StringIO()
    print_table(Console(file=out, width=width), COLUMNS, rows, notes=notes)
    return out.getvalue()


def test_times_of_today_are_hh_mm_ss_others_a_date_and_a_time() -> None:
    assert when(NOW - dt.timedelta(hours=3), NOW) == "19:33:38"
    assert when(dt.datetime(2026, 11, 30, tzinfo=dt.UTC), NOW) == "2026-11-30 00:00:00"
    assert when(dt.datetime(2026, 12, 2, tzinfo=dt.UTC), NOW) == "2026-12-02 00:00:00"
    # another zone's offset is shown in UTC: 00:30 in +02:00 is 22:30 UTC, today
    plus_two = dt.timezone(dt.timedelta(hours=2))
    assert when(dt.datetime(2026, 12, 2, 0, 30, tzinfo=plus_two), NOW) == "22:30:00"
    assert when(None, NOW) == ""


def test_durations_are_their_largest_units() -> None:
    assert [seconds_text(s) for s in (0, 0.266, 9.994, 12.34, 245, 3723, 273_900)] == [
        "0.00s",
        "0.27s",
        "9.99s",
        "12.3s",
        "4m05s",
        "1h02m03s",
        "3d04h05m",
    ]
    start = NOW - dt.timedelta(seconds=75)
    assert duration_text(start, None, NOW) == "1m15s"  # still going: up to now
    assert duration_text(start, start + dt.timedelta(seconds=2), NOW) == "2.00s"
    assert duration_text(None, None, NOW) == ""


def test_an_80_column_table_keeps_states_and_times_whole_and_wraps_ids() -> None:
    rows = [
        ("fetch_everything_from_the_remote_source_of_orders", "upstream_failed", "default",
         "2026-11-30 23:59:59", "1h02m03s"),
        ("b", "success", "a_queue_with_a_rather_long_name", "22:33:38", "0.27s"),
    ]  # fmt: skip
    out = printed(rows, 80, notes=("b, try 1: " + "x" * 150,))

    lines = out.splitlines()
    assert all(len(line) <= 80 for line in lines[:-1]) and len(lines[-1]) == 160
    assert "…" not in out
    for whole in ("upstream_failed", "2026-11-30 23:59:59", "1h02m03s", "22:33:38"):
        assert whole in out
    assert "fetch_everything" in lines[2]


def test_a_narrow_terminal_gets_one_block_per_row() -> None:
    out = printed([("extract", "upstream_failed", "default", "22:33:38", "0.27s")], 30)

    assert out.splitlines() == [
        "task_id: extract",
        "  state: upstream_failed",
        "  queue: default",
        "  start: 22:33:38",
        "  duration: 0.27s",
    ]


ids = st.text(alphabet="abcdefghij_.-/ ", min_size=1, max_size=60).filter(str.strip)


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(
        st.tuples(ids, st.sampled_from(STATES), ids, st.sampled_from(["22:33:38", ""])),
        min_size=1,
        max_size=5,
    ),
    width=st.integers(min_value=20, max_value=140),
)
def test_any_table_fits_its_width_and_keeps_its_kept_cells_whole(
    rows: list[tuple[str, str, str, str]], width: int
) -> None:
    full = [(*row, "0.27s") for row in rows]
    out = printed(full, width)

    assert "…" not in out
    lines = out.splitlines()
    assert all(len(line) <= width for line in lines)
    for _, state, _, start, _ in full:
        assert any(state in line for line in lines)
        assert not start or any(start in line for line in lines)
