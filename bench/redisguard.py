"""Noticing that another process flushed the bench's Redis dbs during a workload, and
deleting the bench's own keys afterwards.

The bench owns Redis dbs 14 and 15 only by convention: a test run elsewhere that
flushes one of them drops the queued messages (a run then waits for Sluice's
queued-timeout re-publish) and the figures mean nothing. A sentinel key per db
is set before each workload and checked after it.
"""

from __future__ import annotations

import redis


class RedisGuard:
    def __init__(self, urls: list[str], tag: str) -> None:
        self.key = f"sluice-bench:{tag}:sentinel"
        self.clients = [redis.Redis.from_url(url) for url in urls]

    def arm(self) -> None:
        for client in self.clients:
            client.set(self.key, b"1", ex=3600)

    def intact(self) -> bool:
        """True if no armed db was flushed since `arm()`."""
        return all(client.exists(self.key) for client in self.clients)

    def close(self) -> None:
        for client in self.clients:
            client.delete(self.key)
            client.close()


def cleanup_redis(url: str, name: str) -> None:
    """Delete the keys that hold `name` (a run's namespace or queue: its queues and
    bindings), nothing else; nothing on a broker that is not Redis (the bench's RabbitMQ
    vhost is deleted whole)."""
    if not url.startswith(("redis://", "rediss://")):
        return
    client = redis.Redis.from_url(url)
    try:
        for key in client.scan_iter(match=f"*{name}*"):
            client.delete(key)
    finally:
        client.close()
