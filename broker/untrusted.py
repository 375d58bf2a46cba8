"""What Sluice reads from its broker is untrusted: anything that can write to Redis (or
RabbitMQ, or the database's notifications) can put junk where Sluice expects a run id or a
message. Junk is dropped, never fatal, and said once.

- `dropped(kind, where, value, why)` logs the first value of each `kind` from each place
  (a key, a channel, a queue) in this process at WARNING (a short preview and its size,
  never the whole value), the later ones at DEBUG: a flood of junk is one line, not one
  per message.
- `parse_run_id(raw)` reads a run id from a broker payload without decoding or copying it
  when it cannot be one (a 10 MB member is rejected by its length).
"""

from __future__ import annotations

import logging
import threading

log = logging.getLogger(__name__)

PREVIEW_BYTES = 60
"""Bytes of a dropped value shown in its WARNING (the rest is only counted)."""

MAX_RUN_ID = 2**63 - 1
"""The largest id a `BIGINT` column holds: a larger "run id" would fail the query it is in."""

_ID_DIGITS = len(str(MAX_RUN_ID))

_lock = threading.Lock()
_told: set[tuple[str, str]] = set()


def preview(value: object) -> str:
    """A bounded, printable view of `value`: its first `PREVIEW_BYTES` bytes and its size."""
    raw = value if isinstance(value, bytes) else str(value).encode("utf-8", "replace")
    head = repr(raw[:PREVIEW_BYTES])
    more = f"... ({len(raw):,} bytes)" if len(raw) > PREVIEW_BYTES else ""
    return head + more


def dropped(kind: str, where: str, value: object, why: str) -> None:
    """Say that a value of `kind` read from `where` was dropped: at WARNING for the first
    of its kind from `where` in this process, at DEBUG afterwards."""
    with _lock:
        first = (kind, where) not in _told
        _told.add((kind, where))
    if first:
        log.warning(
            "dropped %s from %s: %s (%s); anything that can write to the broker can send "
            "this, and Sluice ignores it (further ones are logged at DEBUG)",
            kind,
            where,
            preview(value),
            why,
        )
    else:
        log.debug("dropped %s from %s: %s (%s)", kind, where, preview(value), why)


def parse_run_id(raw: bytes | str) -> int | None:
    """The run id `raw` holds (ASCII digits, 1 to 2**63-1), else None; reads at most a
    few bytes of a value that cannot be one."""
    if not 0 < len(raw) <= _ID_DIGITS:
        return None
    text = raw.decode("ascii", "replace") if isinstance(raw, bytes) else raw
    if not (text.isascii() and text.isdigit()):
        return None
    value = int(text)
    return value if 0 < value <= MAX_RUN_ID else None
