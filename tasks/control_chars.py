"""The one check of user text for control characters that names, keys and URIs share."""

from __future__ import annotations


def first_control_char(text: str) -> str | None:
    """The first C0 control character or DEL in `text`, else None."""
    return next((c for c in text if ord(c) < 0x20 or ord(c) == 0x7F), None)
