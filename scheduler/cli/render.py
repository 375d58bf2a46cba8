"""Showing stored data on a terminal: as data, never as markup or terminal commands.

Anything that comes from the database or a DAG file (an id, a host name, an import
error, a task's log) may hold rich markup (`[/x]`, `[link=…]`) or control characters
(an escape sequence). `cell` makes a rich table cell of it that rich neither parses
nor styles; `visible` spells control characters out (`\\x1b`), so a terminal shows
them instead of obeying them.
"""

from __future__ import annotations

import re
from typing import Any

from rich.text import Text

_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")
"""C0 controls, DEL and C1 controls (U+0080–U+009F; some terminals obey them too)."""
_CONTROL_BUT_LINES = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
"""The same, keeping tab and newline (the lines of a log)."""


def _spell(match: re.Match[str]) -> str:
    return f"\\x{ord(match.group()):02x}"


def visible(text: str, *, keep_lines: bool = False) -> str:
    """`text` with each control character spelled out as `\\xNN` (tab kept; newline
    kept with `keep_lines`, else spelled out too)."""
    pattern = _CONTROL_BUT_LINES if keep_lines else _CONTROL
    return pattern.sub(_spell, text)


def cell(value: Any) -> Text:
    """A table cell showing `value` as it is: no markup, no emoji codes, no highlighting,
    control characters spelled out. None is an empty cell."""
    return Text("" if value is None else visible(str(value)))
