"""The one shape of every back-off in Sluice, through tenacity: a doubling delay.

A retry that sleeps in place is a tenacity `Retrying` built on `doubling` (the worker's
result writes, a job's database steps, a daemon waiting for its database at start). A
retry that is due later instead of slept for (a callback's `next_attempt_at`, a loop's
pause across its passes) asks the same wait strategy for its delay (`delay_after`).

Invariant: the delay after the n-th failure in a row is `first * 2**(n-1)`, at most
`most`; it never depends on anything but n.
"""

from __future__ import annotations

from collections.abc import Callable

from tenacity import RetryCallState, Retrying, wait_exponential

Wait = Callable[[RetryCallState], float]
"""A tenacity wait strategy: the delay before the next attempt."""


def doubling(first: float, most: float = float("inf")) -> wait_exponential:
    """`first`, then twice the last delay at each failure, at most `most` seconds."""
    return wait_exponential(multiplier=first, max=most)


def delay_after(wait: Wait, failures: int) -> float:
    """The delay `wait` gives after the `failures`-th failed attempt in a row (1 for the
    first), as a tenacity retry would sleep it."""
    state = RetryCallState(Retrying(), fn=None, args=(), kwargs={})
    state.attempt_number = failures
    return wait(state)


def failure_of(state: RetryCallState) -> BaseException:
    """The exception of the attempt that just failed (what a `before_sleep` reports)."""
    failed = state.outcome.exception() if state.outcome is not None else None
    if failed is None:
        raise ValueError("no failed attempt to report")
    return failed
