"""Text from outside (a task's error, its output, a DAG file's import error) made storable.

PostgreSQL refuses NUL in text and every backend refuses what is not valid UTF-8 (lone
surrogates): such text would fail the very write that records it, and the try would stay
`running` until the heartbeat sweep wrote a wrong error over it.
"""

from __future__ import annotations


def storable(text: str) -> str:
    """`text` as valid UTF-8 with NULs shown as U+FFFD (lone surrogates become '?')."""
    return text.replace("\x00", "\ufffd").encode("utf-8", "replace").decode("utf-8")
