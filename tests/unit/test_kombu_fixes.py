"""`broker.kombu_fixes`: a closed Redis transport gives a connection error (recoverable
for Celery's consumer) instead of an AttributeError (fatal); one Redis client per pool."""

from __future__ import annotations

from typing import Any

import pytest
from kombu import Connection
from redis.exceptions import ConnectionError as RedisConnectionError

from sluice.broker.kombu_fixes import guard_closed_redis_transport, reuse_redis_clients


def test_a_channel_of_a_collected_connection_raises_a_connection_error(redis_url: str) -> None:
    guard_closed_redis_transport()
    guard_closed_redis_transport()  # idempotent
    connection = Connection(redis_url)
    channel: Any = connection.default_channel  # its private methods are what is fixed
    assert channel._connparams()["host"] == "127.0.0.1"  # an open transport is untouched
    errors = connection.connection_errors
    connection._do_close_transport()  # what Celery's collect() leaves behind
    with pytest.raises(RedisConnectionError) as raised:
        channel._connparams()
    assert isinstance(raised.value, errors)  # so closing the channel ignores it
    connection.release()


def test_a_channel_reuses_its_redis_client_until_its_pool_changes(redis_url: str) -> None:
    reuse_redis_clients()
    reuse_redis_clients()  # idempotent
    connection = Connection(redis_url)
    try:
        channel: Any = connection.default_channel
        queue = f"sluicetest-reuse-{id(channel)}"
        with channel.conn_or_acquire() as first, channel.conn_or_acquire() as second:
            assert first is second
            first.lpush(queue, b"x")  # usable: commands check a connection out of the pool
            assert second.rpop(queue) == b"x"
        channel._after_fork()  # a forked child drops the parent's pools
        with channel.conn_or_acquire() as after_fork:
            assert after_fork is not first and after_fork.ping()
    finally:
        connection.release()
