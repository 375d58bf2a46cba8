"""Wake-ups over PostgreSQL `LISTEN`/`NOTIFY` (no Redis): between processes' wakers on a
real database, a burst drained by one wait, news of thousands of runs, namespaces kept
apart, a database that is down or drops the listener's connection."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, text

from sluice.broker.pg_wakeup import PgWaker


@pytest.fixture
def wakers(pg_url: str) -> Iterator[list[PgWaker]]:
    made: list[PgWaker] = []
    yield made
    for waker in made:
        waker.close()


def _waker(wakers: list[PgWaker], url: str, namespace: str = "ns") -> PgWaker:
    waker = PgWaker(url, namespace)
    wakers.append(waker)
    return waker


def _listening(waiter: PgWaker) -> None:
    """The first wait opens the listener (wake-ups sent before it are not heard)."""
    assert waiter.wait(0.0) is False
    waiter.take_news()


def test_a_wake_up_reaches_another_waker_with_its_run(pg_url: str, wakers: list[PgWaker]) -> None:
    waiter, sender = _waker(wakers, pg_url), _waker(wakers, pg_url)
    _listening(waiter)
    threading.Timer(0.2, lambda: sender.wake(42, shared=True)).start()
    assert waiter.wait(10.0) is True
    assert waiter.take_news() == {42}
    assert waiter.wait(0.05) is False and waiter.take_news() == set()
    sender.wake()  # no run named: look at everything
    assert waiter.wait(5.0) is True and waiter.take_news() is None


def test_one_wait_drains_a_burst(pg_url: str, wakers: list[PgWaker]) -> None:
    waiter, sender = _waker(wakers, pg_url), _waker(wakers, pg_url)
    _listening(waiter)
    for run_id in range(1, 51):
        sender.wake(run_id)
    time.sleep(0.3)  # let every notification arrive before the one wait
    assert waiter.wait(5.0) is True
    assert waiter.take_news() == set(range(1, 51))
    assert waiter.wait(0.05) is False


def test_shared_news_of_thousands_of_runs_arrive_whole(pg_url: str, wakers: list[PgWaker]) -> None:
    # 3,000 ids do not fit one notification's payload (under 8,000 bytes)
    first, second, sharer = (_waker(wakers, pg_url) for _ in range(3))
    _listening(first)
    _listening(second)
    runs = set(range(1_000_000, 1_003_000))
    sharer.share(runs)
    for waiter in (first, second):  # broadcast: each scheduler hears them
        heard: set[int] = set()
        deadline = time.monotonic() + 10
        while heard != runs and time.monotonic() < deadline:
            waiter.wait(1.0)
            heard |= waiter.take_news() or set()
        assert heard == runs


def test_namespaces_do_not_wake_each_other(pg_url: str, wakers: list[PgWaker]) -> None:
    ours, theirs = _waker(wakers, pg_url, "ours"), _waker(wakers, pg_url, "theirs")
    _listening(ours)
    _waker(wakers, pg_url, "theirs").wake(7)
    assert ours.wait(0.5) is False
    _listening(theirs)
    _waker(wakers, pg_url, "ours").wake(8)
    assert ours.wait(5.0) is True and ours.take_news() == {8}


def test_a_database_that_is_down_costs_the_timeout_and_a_full_look(
    wakers: list[PgWaker],
) -> None:
    down = _waker(wakers, "postgresql+psycopg://postgres@127.0.0.1:1/nowhere")
    down.wake(3)  # never raises
    down.share([1, 2])
    started = time.monotonic()
    assert down.wait(0.3) is False
    assert time.monotonic() - started >= 0.25  # slept its timeout: no busy loop
    assert down.take_news() is None  # wake-ups may have been missed: look at everything


def test_a_dropped_listener_connection_listens_again(pg_url: str, wakers: list[PgWaker]) -> None:
    waiter, sender = _waker(wakers, pg_url), _waker(wakers, pg_url)
    _listening(waiter)
    engine = create_engine(pg_url)
    with engine.connect() as conn:  # the server ends the listener's session
        conn.execute(
            text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = 'sluice-waker-listen' AND datname = current_database()"
            )
        )
        conn.commit()
    engine.dispose()
    assert waiter.wait(0.5) is False  # the lost connection is noticed
    assert waiter.take_news() is None  # and what it missed is looked at
    _listening(waiter)
    sender.wake(9)
    assert waiter.wait(5.0) is True and waiter.take_news() == {9}
