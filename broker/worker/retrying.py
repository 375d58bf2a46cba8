"""Retrying a worker's database write when the connection fails: one tenacity policy.

Invariant: only compare-and-set writes are retried (a retry cannot apply twice: the
second attempt of a write that did commit loses its CAS and says so).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy.exc import OperationalError
from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_attempt

from sluice.scheduler.core.retries import doubling, failure_of

log = logging.getLogger(__name__)

T = TypeVar("T")

RESULT_WRITE_ATTEMPTS = 3
"""Tries of the final write when the database connection fails (it is a CAS: safe to redo)."""


def _say(state: RetryCallState) -> None:
    log.warning(
        "writing the result failed (attempt %s): %s", state.attempt_number, failure_of(state)
    )


RESULT_WRITES = Retrying(
    retry=retry_if_exception_type(OperationalError),
    stop=stop_after_attempt(RESULT_WRITE_ATTEMPTS),
    wait=doubling(0.5),
    before_sleep=_say,
    reraise=True,
)
"""An OperationalError (a dropped connection) is tried again after 0.5 s, then 1 s;
the third one, or any other error, is raised as it is."""


def retrying(write: Callable[[], T], policy: Retrying = RESULT_WRITES) -> T:
    """`write()`'s value, retried as `policy` says (each call gets its own copy of it:
    its state is per call, so threads and nested calls never share one)."""
    return policy.copy()(write)
