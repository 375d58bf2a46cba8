"""Retrying a worker's database write when the connection fails: one tenacity policy.

Invariant: only compare-and-set writes are retried (a retry cannot apply twice: the
second attempt of a write that did commit loses its CAS and says so).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy.exc import OperationalError
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
)

from sluice.scheduler.core.retries import doubling, failure_of

log = logging.getLogger(__name__)

T = TypeVar("T")

RESULT_WRITE_ATTEMPTS = 12
RESULT_WRITE_SECONDS = 30.0
"""How often and how long the final write is tried again while the database cannot be reached (a
restart, a cut link): it is a CAS, so a retry is safe; past this the try is left
`running` for the schedulers' sweep."""


def _say(state: RetryCallState) -> None:
    log.warning(
        "writing the result failed (attempt %s): %s", state.attempt_number, failure_of(state)
    )


RESULT_WRITES = Retrying(
    retry=retry_if_exception_type(OperationalError),
    stop=stop_after_delay(RESULT_WRITE_SECONDS) | stop_after_attempt(RESULT_WRITE_ATTEMPTS),
    wait=doubling(0.25, most=4.0),
    before_sleep=_say,
    reraise=True,
)
"""An OperationalError (a dropped or refused connection) is tried again after 0.25 s,
0.5 s, 1 s, 2 s, then every 4 s, for up to `RESULT_WRITE_SECONDS` and
`RESULT_WRITE_ATTEMPTS` attempts (about 32 s of pauses); the last one, or any
other error, is raised as it is. A try whose body ended keeps its result through a
database restart."""


def retrying(write: Callable[[], T], policy: Retrying = RESULT_WRITES) -> T:
    """`write()`'s value, retried as `policy` says (each call gets its own copy of it:
    its state is per call, so threads and nested calls never share one)."""
    return policy.copy()(write)
