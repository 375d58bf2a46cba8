"""The kinds of callbacks, the bits of `callback_mask`, and the states that fire them.

A TI's and a run's `callback_mask` (set when the row is created, from the serialized
DAG) says which of its state moves have a callback to run; the database triggers of
migration 0009 read it, so only rows with callbacks pay anything at a state write.
"""

from __future__ import annotations

from collections.abc import Iterable

ON_SUCCESS = "on_success"
ON_FAILURE = "on_failure"
ON_RETRY = "on_retry"
ON_DEADLINE_MISSED = "on_deadline_missed"

BITS = {ON_SUCCESS: 1, ON_FAILURE: 2, ON_RETRY: 4}
"""The bit of each kind a state move fires (a deadline is fired by the scheduler). The
triggers of migration 0009 map the states to them: success → on_success, failed →
on_failure, up_for_retry → on_retry."""


def mask_of(kinds: Iterable[str]) -> int:
    """The `callback_mask` for a task's or a DAG's serialized `callbacks`."""
    mask = 0
    for kind in kinds:
        mask |= BITS.get(kind, 0)
    return mask


class Status:
    """A due callback's delivery: pending → queued (published with a token) → running (a
    worker claimed that token) → delivered, or back to pending (it raised: retried with
    backoff) until `failed` (out of attempts)."""

    PENDING = "pending"
    QUEUED = "queued"
    RUNNING = "running"
    DELIVERED = "delivered"
    FAILED = "failed"

    ALL = (PENDING, QUEUED, RUNNING, DELIVERED, FAILED)
    UNFINISHED = (PENDING, QUEUED, RUNNING)
    FINISHED = (DELIVERED, FAILED)
