"""Fixes to kombu's Redis transport: a guard for a kombu/Celery 5.7 crash when the Redis
broker goes away, and reusing Redis clients (`reuse_redis_clients`).

When a worker loses its broker connection while it holds an unacknowledged message
(always, with `acks_late`, while a task runs), Celery's consumer collects the
connection (kombu sets the transport's `client` to None) and then closes it again;
closing a channel opened in between restores the unacked messages through a fresh
Redis client, whose connection parameters are read from that None client:
`AttributeError: 'NoneType' object has no attribute 'hostname'`, which Celery treats
as unrecoverable, so the worker exits instead of reconnecting (seen here when
Redis was killed and restarted under a running task).

The guard makes that read raise Redis' `ConnectionError` instead: a connection error,
which kombu ignores while closing, so the consumer goes on to reconnect. Messages
that could not be restored are redelivered by Redis' visibility timeout (or were lost
with the broker, and Sluice's queued-timeout sweep re-publishes their TIs).
"""

from __future__ import annotations

from typing import Any

_APPLIED = "_sluice_closed_transport_guard"


def guard_closed_redis_transport() -> None:
    """Install the guard on kombu's Redis channel (idempotent)."""
    from kombu.transport import redis as kombu_redis
    from redis.exceptions import ConnectionError as RedisConnectionError

    channel = kombu_redis.Channel
    if getattr(channel, _APPLIED, False):
        return
    original = channel._connparams

    def _connparams(self: Any, asynchronous: bool = False) -> Any:
        transport = self.connection
        if transport is None or transport.client is None:
            raise RedisConnectionError("the broker connection is closed")
        return original(self, asynchronous=asynchronous)

    channel._connparams = _connparams  # type: ignore[method-assign]
    setattr(channel, _APPLIED, True)


_REUSE_APPLIED = "_sluice_reuses_redis_client"
_CLIENT = "_sluice_sync_client"


def reuse_redis_clients() -> None:
    """Make kombu's Redis channel reuse one client object per connection pool (idempotent).

    kombu builds a new `redis.Redis` around the channel's pool for every publish and
    every acknowledgement (`Channel.conn_or_acquire`); with redis-py 8 each build fills
    a table of ~200 response callbacks, which cost more CPU than the command it serves.
    A client holds no connection of its own (each command checks one out of the pool),
    so one per pool is what kombu meant. A new pool (after a fork or a reconnect) gets a
    new client.
    """
    from kombu.transport import redis as kombu_redis

    channel = kombu_redis.Channel
    if getattr(channel, _REUSE_APPLIED, False):
        return
    original = channel._create_client

    def _create_client(self: Any, asynchronous: bool = False) -> Any:
        if asynchronous:
            return original(self, asynchronous=True)
        pool = self.pool
        cached = self.__dict__.get(_CLIENT)
        if cached is None or cached[0] is not pool:
            cached = (pool, original(self, asynchronous=False))
            self.__dict__[_CLIENT] = cached
        return cached[1]

    channel._create_client = _create_client  # type: ignore[method-assign]
    setattr(channel, _REUSE_APPLIED, True)
