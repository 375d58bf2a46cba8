"""The private attributes of pinned dependencies that Sluice relies on are still there.

`sluice.broker.kombu_fixes` wraps two private methods of kombu's Redis channel; kombu is
pinned to the minor version tested (pyproject.toml and constraints.txt); when an
upgrade removes one of them, this test says which and where. (SQLAlchemy's are no longer
used: the one-query path runs the named statements of scheduler/core/sql/ through
psycopg.)
"""

from __future__ import annotations

import inspect

import kombu
from kombu.transport import redis as kombu_redis


def needs(owner: object, name: str, package: str, version: str, user: str) -> object:
    found = getattr(owner, name, None)
    assert found is not None, (
        f"{user} relies on {package}'s private {getattr(owner, '__name__', owner)}.{name}, "
        f"which {package} {version} no longer has: adapt {user} before raising the pin"
    )
    return found


def test_kombu_redis_channel_internals() -> None:
    user = "sluice.broker.kombu_fixes"
    for name in ("_connparams", "_create_client"):
        method = needs(kombu_redis.Channel, name, "kombu", kombu.__version__, user)
        assert "asynchronous" in inspect.signature(method).parameters, (  # type: ignore[arg-type]
            f"{user}: kombu's Channel.{name} no longer takes `asynchronous`"
        )
