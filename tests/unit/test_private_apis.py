"""The private attributes of pinned dependencies that Sluice relies on are still there.

`sluice.scheduler.core.db` binds one-query statements with SQLAlchemy's compiled statement
internals, and `sluice.broker.kombu_fixes` wraps two private methods of kombu's Redis
channel. Both packages are pinned to the minor versions tested (pyproject.toml and
constraints.txt); when an upgrade removes one of these, this test says which and where.
"""

from __future__ import annotations

import inspect

import kombu
import sqlalchemy
from kombu.transport import redis as kombu_redis
from sqlalchemy import bindparam, column, select, table
from sqlalchemy.dialects import postgresql


def needs(owner: object, name: str, package: str, version: str, user: str) -> object:
    found = getattr(owner, name, None)
    assert found is not None, (
        f"{user} relies on {package}'s private {getattr(owner, '__name__', owner)}.{name}, "
        f"which {package} {version} no longer has: adapt {user} before raising the pin"
    )
    return found


def test_sqlalchemy_compiled_statement_internals() -> None:
    user = "sluice.scheduler.core.db._binding"
    t = table("t", column("a"), column("b"))
    plain = select(t.c.a).where(t.c.b == bindparam("b")).compile(dialect=postgresql.dialect())
    expanding = (
        select(t.c.a)
        .where(t.c.b.in_(bindparam("bs", expanding=True)))
        .compile(dialect=postgresql.dialect())
    )
    version = sqlalchemy.__version__
    processors = needs(plain, "_bind_processors", "SQLAlchemy", version, user)
    assert hasattr(processors, "get"), f"{user}: _bind_processors is no longer a mapping"
    for name in ("bind_names", "post_compile_params", "literal_execute_params"):
        needs(expanding, name, "SQLAlchemy", version, user)
    state = needs(expanding, "construct_expanded_state", "SQLAlchemy", version, user)
    expanded = state({"bs": [1, 2]})  # type: ignore[operator]
    for name in ("statement", "parameters", "processors", "parameter_expansion"):
        needs(expanded, name, "SQLAlchemy", version, user)


def test_kombu_redis_channel_internals() -> None:
    user = "sluice.broker.kombu_fixes"
    for name in ("_connparams", "_create_client"):
        method = needs(kombu_redis.Channel, name, "kombu", kombu.__version__, user)
        assert "asynchronous" in inspect.signature(method).parameters, (  # type: ignore[arg-type]
            f"{user}: kombu's Channel.{name} no longer takes `asynchronous`"
        )
