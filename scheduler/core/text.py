"""Text from outside (a task's error, its output, a DAG file's import error) made storable.

`one_line` makes such text fit one line of a message or a log.

PostgreSQL refuses NUL in text and every backend refuses what is not valid UTF-8 (lone
surrogates): such text would fail the very write that records it, and the try would stay
`running` until the heartbeat sweep wrote a wrong error over it.
"""

from __future__ import annotations

import re


def storable(text: str) -> str:
    """`text` as valid UTF-8 with NULs shown as U+FFFD (lone surrogates become '?')."""
    return text.replace("\x00", "\ufffd").encode("utf-8", "replace").decode("utf-8")


_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")
"""C0 controls (tab aside), DEL and C1 controls: a terminal may obey them."""


def one_line(text: str, limit: int | None = None) -> str:
    """`text` on one line (whitespace runs collapsed, control characters spelled out as
    `\\xNN`), at most `limit` characters if given (cut with "...")."""
    line = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", " ".join(text.split()))
    if limit is None or len(line) <= limit:
        return line
    return line[: max(limit - 3, 0)] + "..."
