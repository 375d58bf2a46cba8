"""Tables fitted to the terminal: the information is never the part that is cut.

A `Col` is either kept (`keep=True`: states, times, durations, counts; always shown
whole, on one line) or flexible (ids, names, paths, queues: it gets what is left of the
width, and a value wider than its column wraps at spaces and then folds onto the next
line; nothing is replaced by an ellipsis). Flexible columns get their whole width in
the order they come, so put the ids first. When even the kept columns cannot fit beside
a few characters of each flexible one (a narrow terminal), each row is printed as its own
block of `header: value` lines instead. Long texts (errors) go under the table as notes,
each a line of its own that the terminal wraps, so they can be read and copied whole.
Every value is shown as data (`render.cell`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Column, Table
from rich.text import Text

from sluice.scheduler.cli.render import cell

GAP = 2
"""Characters between two columns."""
MIN_FLEX = 8
"""The narrowest a flexible column is made before the rows become blocks."""


@dataclass(frozen=True)
class Col:
    header: str
    keep: bool = False
    """Shown whole on one line: never cut, never wrapped."""
    right: bool = False
    """Right-aligned (numbers)."""


def console() -> Console:
    """The console every table goes to: stdout, width from the terminal (or COLUMNS), our
    own markup only; no highlighting, no emoji codes."""
    return Console(highlight=False, emoji=False)


def as_text(value: Any) -> Text:
    """A cell: a `Text` as it is (it may carry a style), anything else as data."""
    return value if isinstance(value, Text) else cell(value)


def widths(cols: Sequence[Col], rows: Sequence[Sequence[Text]], width: int) -> list[int] | None:
    """Each column's width for a table at most `width` wide, or None when the kept columns
    and `MIN_FLEX` of each flexible one do not fit (print blocks instead)."""
    natural = [
        max([cell(col.header).cell_len, *(row[i].cell_len for row in rows)])
        for i, col in enumerate(cols)
    ]
    kept = sum(w for w, col in zip(natural, cols, strict=True) if col.keep)
    flex = [i for i, col in enumerate(cols) if not col.keep]
    room = width - kept - GAP * (len(cols) - 1)
    if room < sum(min(natural[i], MIN_FLEX) for i in flex):
        return None
    out = list(natural)
    for i in flex:
        out[i] = min(natural[i], MIN_FLEX)
    room -= sum(out[i] for i in flex)
    for i in flex:  # what is left goes to the flexible columns in order: ids first
        extra = min(natural[i] - out[i], room)
        out[i] += extra
        room -= extra
    return out


def print_table(
    out: Console,
    cols: Sequence[Col],
    rows: Iterable[Sequence[Any]],
    *,
    notes: Iterable[Text | str] = (),
    empty: str | None = None,
) -> None:
    """Print `rows` under `cols` fitted to `out`'s width (blocks when too narrow), then each
    note on a line of its own. With no rows and `empty` given, print `empty` instead."""
    cells = [[as_text(v) for v in row] for row in rows]
    if not cells and empty is not None:
        out.print(cell(empty))
    else:
        fitted = widths(cols, cells, out.width)
        if fitted is None:
            print_blocks(out, cols, cells)
        else:
            table = Table(
                *(
                    Column(
                        cell(col.header),
                        width=w,
                        no_wrap=col.keep,
                        overflow="fold",
                        justify="right" if col.right else "left",
                    )
                    for col, w in zip(cols, fitted, strict=True)
                ),
                box=box.SIMPLE_HEAD,
                show_edge=False,
                pad_edge=False,
                padding=(0, 1, 0, 0),
            )
            for row in cells:
                table.add_row(*row)
            out.print(table)
    for note in notes:
        out.print(as_text(note), soft_wrap=True)


def print_blocks(out: Console, cols: Sequence[Col], rows: Sequence[Sequence[Text]]) -> None:
    """Each row as `header: value` lines (the first unindented, the others under it, empty
    values left out; all unindented when the first column is no key but a count, as in
    counts by state): for a terminal too narrow for the table."""
    indent = "  " if not cols[0].keep else ""
    for row in rows:
        for n, (col, value) in enumerate(zip(cols, row, strict=True)):
            if n and not value.plain:
                continue
            line = Text(indent if n else "")
            line.append_text(cell(col.header))
            line.append(": ")
            line.append_text(value)
            out.print(line, overflow="fold")
