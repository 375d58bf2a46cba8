"""Reaching the database: where it is and why it failed, in one line; a bounded back-off.

Invariants: a line names the database by host, port and name, never by its URL, user or
password (a password echoed in a driver's message is masked); it is one line with
control characters spelled out. The back-off starts at `Settings.db_retry_delay` and
doubles up to `Settings.db_retry_max_delay` (`retries.doubling`); a daemon waiting at
start never gives up (its supervisor, or the user, stops it), and SQLite, which has no
server to wait for, is not waited for.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy import Engine
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, InterfaceError, OperationalError
from tenacity import RetryCallState, Retrying, retry_if_exception

from sluice.scheduler.core.migrate import check_current
from sluice.scheduler.core.retries import delay_after, doubling, failure_of
from sluice.scheduler.core.settings import Settings
from sluice.scheduler.core.text import one_line

T = TypeVar("T")

MAX_REASON_CHARS = 300

log = logging.getLogger(__name__)

UNREACHABLE = (OperationalError, InterfaceError)
"""What a database that does not answer (yet) raises: not running, no such database yet,
refusing connections while it starts, a network that drops them."""


def database_place(url: str) -> str:
    """Where the database is, for a message: host, port and database; no user, no password."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        return "SLUICE_DATABASE_URL (not a database URL)"
    if parsed.get_backend_name() == "sqlite":
        return f"sqlite {parsed.database or ':memory:'}"
    host = parsed.host or "localhost"
    port = f":{parsed.port}" if parsed.port else ""
    return f"{host}{port}/{parsed.database or ''}"


def database_reason(exc: BaseException, url: str) -> str:
    """The driver's reason, one line, without the URL's password."""
    orig = getattr(exc, "orig", None) or exc
    lines = [line.strip() for line in str(orig).splitlines() if line.strip()]
    reason = lines[0] if lines else type(orig).__name__
    if " failed: " in reason:  # libpq: connection to server at "h", port p failed: <why>
        reason = reason.rsplit(" failed: ", 1)[1]
    try:
        password = make_url(url).password
    except ArgumentError:
        password = None
    if password:
        reason = reason.replace(str(password), "***")
    return one_line(reason, MAX_REASON_CHARS)


class Backoff:
    """Delays between database attempts: `db_retry_delay`, doubled at each failure in a
    row, at most `db_retry_max_delay` (`retries.doubling`); `reset` after a success.
    Not thread-safe: one loop owns it."""

    def __init__(self, settings: Settings) -> None:
        self.wait = doubling(settings.db_retry_delay, settings.db_retry_max_delay)
        self._failures = 0

    def take(self) -> float:
        """The delay to wait after one more failure."""
        self._failures += 1
        return delay_after(self.wait, self._failures)

    def reset(self) -> None:
        self._failures = 0


def wait_for_database(
    engine: Engine,
    settings: Settings,
    *,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Return once the database answers with the current schema; the attempts it took.

    Each failed attempt logs one WARNING line (where, which attempt, why, when the next
    is). A schema that is missing or old raises `SchemaNotReady` at once: waiting would
    not fix it, `sluice db migrate` does.
    """
    _, attempts = until_reachable(engine, settings, lambda: check_current(engine), sleep=sleep)
    if attempts > 1:
        log.info(
            "database at %s answered (attempt %d)", database_place(settings.database_url), attempts
        )
    return attempts


def until_reachable(
    engine: Engine,
    settings: Settings,
    step: Callable[[], T],
    *,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[T, int]:
    """`step()` (a daemon's start-up read) and the attempts it took, tried again while
    the database does not answer or drops the connection (`UNREACHABLE`), backing off as
    `SLUICE_DB_RETRY_DELAY` and `SLUICE_DB_RETRY_MAX_DELAY` say, one WARNING line each.
    Any other error is raised at once."""
    url = settings.database_url
    place = database_place(url)

    def unreachable(exc: BaseException) -> bool:
        return isinstance(exc, UNREACHABLE) and engine.dialect.name != "sqlite"

    def say(state: RetryCallState) -> None:
        log.warning(
            "database at %s unavailable (attempt %d): %s; retrying in %gs",
            place,
            state.attempt_number,
            database_reason(failure_of(state), url),
            state.upcoming_sleep,
        )

    policy = Retrying(
        retry=retry_if_exception(unreachable),
        wait=doubling(settings.db_retry_delay, settings.db_retry_max_delay),
        before_sleep=say,
        sleep=sleep,
        reraise=True,
    )
    for attempt in policy:
        with attempt:
            done = step()
    return done, attempt.retry_state.attempt_number
