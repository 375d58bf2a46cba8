"""Retries through one tenacity policy that returns its function's value (issue 40, 4), and
the one doubling back-off behind the database waits and the callbacks' next attempt."""

from __future__ import annotations

import logging

import pytest
from sqlalchemy.exc import OperationalError

from sluice.broker.worker.retrying import (
    RESULT_WRITE_ATTEMPTS,
    RESULT_WRITE_SECONDS,
    RESULT_WRITES,
    retrying,
)
from sluice.scheduler.core.db_wait import Backoff
from sluice.scheduler.core.retries import delay_after, doubling
from sluice.scheduler.core.settings import Settings


def dropped() -> OperationalError:
    return OperationalError("UPDATE task_instance", None, Exception("server closed the connection"))


def test_a_retried_write_returns_its_value_not_a_flag(caplog: pytest.LogCaptureFixture) -> None:
    """Two dropped connections, then the write's own value: what it read comes back as the
    return value (no list filled in by the caller), after pauses of 0.5 s and 1 s."""
    slept: list[float] = []
    calls: list[int] = []

    def write() -> tuple[str, int]:
        calls.append(1)
        if len(calls) < 3:
            raise dropped()
        return ("won", 7)

    with caplog.at_level(logging.WARNING):
        value: tuple[str, int] = retrying(write, RESULT_WRITES.copy(sleep=slept.append))

    assert value == ("won", 7) and len(calls) == 3
    assert slept == [0.25, 0.5]
    said = [r.getMessage() for r in caplog.records if "writing the result failed" in r.getMessage()]
    assert [line.split(")")[0] for line in said] == [
        "writing the result failed (attempt 1",
        "writing the result failed (attempt 2",
    ]


def test_a_write_raises_its_own_error_after_bounded_tries_or_at_once_if_not_a_drop() -> None:
    """A database restart is ridden out (about 32 s of pauses, at most 4 s each), then the
    drop is raised; any other error at once."""
    slept: list[float] = []
    policy = RESULT_WRITES.copy(sleep=slept.append)
    calls: list[int] = []

    def always_dropped() -> bool:
        calls.append(1)
        raise dropped()

    with pytest.raises(OperationalError):
        retrying(always_dropped, policy)
    assert len(calls) == RESULT_WRITE_ATTEMPTS == 12
    assert slept == [0.25, 0.5, 1.0, 2.0] + [4.0] * 7
    assert sum(slept) <= RESULT_WRITE_SECONDS + 2

    def refused() -> bool:
        calls.append(1)
        raise ValueError("not a connection error")

    calls.clear()
    with pytest.raises(ValueError, match="not a connection error"):
        retrying(refused, policy)
    assert len(calls) == 1


def test_every_back_off_doubles_up_to_its_bound() -> None:
    """The database's (SLUICE_DB_RETRY_DELAY 0.1, SLUICE_DB_RETRY_MAX_DELAY 0.4: the
    delays a waiting daemon logs) and a callback's next attempt (10 s doubled, at most an
    hour) are one wait strategy."""
    env = {"SLUICE_DB_RETRY_DELAY": "0.1", "SLUICE_DB_RETRY_MAX_DELAY": "0.4"}
    backoff = Backoff(Settings.from_env(env))
    assert [backoff.take() for _ in range(4)] == [0.1, 0.2, 0.4, 0.4]
    backoff.reset()
    assert backoff.take() == 0.1
    callback = doubling(10.0, 3600.0)
    assert [delay_after(callback, n) for n in (1, 2, 3, 4)] == [10, 20, 40, 80]
    assert delay_after(callback, 9) == 2560 and delay_after(callback, 10) == 3600
    assert delay_after(callback, 10_000) == 3600
