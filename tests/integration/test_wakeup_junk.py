"""Junk in the wake-ups is dropped with one WARNING, never raised (issue 39, 4.1: `SADD
<ns>:news notanint` and a publish on the wake-up channel raised `ValueError` at `int(m)`
up to the scheduler's loop). Real Redis and PostgreSQL.
"""

from __future__ import annotations

import logging
import uuid

import psycopg
import pytest
import redis

from sluice.broker.pg_wakeup import PgWaker, pg_conninfo
from sluice.broker.untrusted import MAX_RUN_ID
from sluice.broker.wakeup import RedisWaker, wakeup_channel

HUGE = b"9" * 10_000_000
"""A 10 MB member of digits: it must be neither parsed nor logged whole."""

JUNK = [
    b"notanint",
    b"\xff\xfe\x00binary",
    "²".encode(),  # a Unicode digit: `str.isdigit` says yes, `int` says no
    str(MAX_RUN_ID + 1).encode(),  # out of a BIGINT's range
    b"0",
    b"-5",
    b"",
    HUGE,
]


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_junk_members_of_the_news_set_are_dropped_with_one_warning(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a news set holding junk beside one real run id
    namespace = f"t{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(redis_url)
    waker = RedisWaker(redis_url, namespace, batch=100)
    try:
        waker.listen()
        waker.take_news()  # the first pass looks at everything
        client.sadd(f"{namespace}:news", 42, *[m for m in JUNK if m])
        client.publish(wakeup_channel(redis_url, namespace), b"+")
        # When the scheduler takes its news
        with caplog.at_level(logging.DEBUG, logger="sluice.broker"):
            assert waker.wait(5.0) is True
            news = waker.take_news()
        # Then the run id is there, the junk is gone from Redis, and said once, bounded
        assert news == {42}
        assert client.exists(f"{namespace}:news") == 0
        [warning] = warnings(caplog)
        assert "dropped a shared-news member" in warning
        assert all(len(r.getMessage()) < 600 for r in caplog.records)
    finally:
        waker.close()
        client.close()


def test_junk_published_on_the_wakeup_channel_wakes_nothing_and_is_said_once(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    namespace = f"t{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(redis_url)
    waker = RedisWaker(redis_url, namespace)
    channel = wakeup_channel(redis_url, namespace)
    try:
        waker.listen()
        waker.take_news()
        with caplog.at_level(logging.DEBUG, logger="sluice.broker"):
            for junk in JUNK:
                client.publish(channel, junk)
            assert waker.wait(1.0) is False  # junk wakes nothing
            client.publish(channel, b"7")
            assert waker.wait(5.0) is True
        assert waker.take_news() == {7}
        [warning] = warnings(caplog)
        assert "dropped a wake-up that names no run" in warning and channel in warning
        assert all(len(r.getMessage()) < 600 for r in caplog.records)
    finally:
        waker.close()
        client.close()


def test_junk_notified_on_the_postgresql_channel_wakes_nothing(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The same hole without Redis: anyone who can connect to the database can NOTIFY."""
    namespace = f"t{uuid.uuid4().hex[:8]}"
    waker = PgWaker(pg_url, namespace)
    try:
        waker.listen()
        waker.take_news()
        with (
            psycopg.connect(pg_conninfo(pg_url), autocommit=True) as conn,
            caplog.at_level(logging.DEBUG, logger="sluice.broker"),
        ):
            for junk in ["notanint", "²", "1,x,²", str(MAX_RUN_ID + 1), "9" * 7000]:
                conn.execute("SELECT pg_notify(%s, %s)", (waker.channel, junk))
            assert waker.wait(1.0) is True  # "1,x,²" named run 1
            assert waker.take_news() == {1}
            conn.execute("SELECT pg_notify(%s, %s)", (waker.channel, "junk"))
            assert waker.wait(0.5) is False
        [warning] = warnings(caplog)
        assert "dropped a wake-up that names no run" in warning
    finally:
        waker.close()
