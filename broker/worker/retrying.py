"""Retrying a worker's database write when the connection fails.

Invariant: only compare-and-set writes are retried (a retry cannot apply twice: the
second attempt of a write that did commit loses its CAS and says so).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy.exc import OperationalError

log = logging.getLogger("sluice.worker")

RESULT_WRITE_ATTEMPTS = 3
"""Tries of the final write when the database connection fails (it is a CAS: safe to redo)."""


T = TypeVar("T")


def retrying(write: Callable[[], T]) -> T:
    """`write()` until it returns, retrying an OperationalError (a dropped connection)
    with a growing pause, RESULT_WRITE_ATTEMPTS times in all; what it returned."""
    for attempt in range(1, RESULT_WRITE_ATTEMPTS + 1):
        try:
            return write()
        except OperationalError as exc:
            if attempt == RESULT_WRITE_ATTEMPTS:
                raise
            log.warning("writing the result failed (attempt %s): %s", attempt, exc)
            time.sleep(0.5 * 2 ** (attempt - 1))
    raise AssertionError("unreachable")
