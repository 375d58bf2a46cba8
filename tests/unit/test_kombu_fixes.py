"""The guard of `broker.kombu_fixes`: a closed Redis transport gives a connection error
(recoverable for Celery's consumer) instead of an AttributeError (fatal)."""

from __future__ import annotations

import pytest
from kombu import Connection
from redis.exceptions import ConnectionError as RedisConnectionError

from broker.kombu_fixes import guard_closed_redis_transport


def test_a_channel_of_a_collected_connection_raises_a_connection_error(redis_url: str) -> None:
    guard_closed_redis_transport()
    guard_closed_redis_transport()  # idempotent
    connection = Connection(redis_url)
    channel = connection.default_channel
    assert channel._connparams()["host"] == "127.0.0.1"  # an open transport is untouched
    errors = connection.connection_errors
    connection._do_close_transport()  # what Celery's collect() leaves behind
    with pytest.raises(RedisConnectionError) as raised:
        channel._connparams()
    assert isinstance(raised.value, errors)  # so closing the channel ignores it
    connection.release()
