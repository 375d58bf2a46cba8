"""Which waker a process gets: the embedded one, Redis (the broker's or
`SLUICE_WAKEUP_URL`), PostgreSQL's notifications when there is no Redis to go through,
or one of its own process on SQLite without Redis."""

from __future__ import annotations

from sluice.broker.pg_wakeup import PgWaker
from sluice.broker.wakeup import LocalWaker, RedisWaker, waker_for, wakeup_url
from sluice.scheduler.core.settings import Settings


def test_the_waker_follows_the_broker_and_the_setting() -> None:
    redis = Settings(broker_url="redis://127.0.0.1:6379/3", namespace="n")
    assert wakeup_url(redis) == "redis://127.0.0.1:6379/3"
    waker = waker_for(redis)
    assert isinstance(waker, RedisWaker) and waker.channel == "n:3:wakeup"
    rabbit = Settings(
        broker_url="amqp://guest:guest@127.0.0.1:5672/v",
        database_url="postgresql+psycopg://u:secret@db.example:5433/sl",
        namespace="n",
    )
    assert wakeup_url(rabbit) is None
    pg = waker_for(rabbit)
    assert isinstance(pg, PgWaker) and pg.channel == "sluice_wakeup:n"
    assert pg.conninfo == "postgresql://u:secret@db.example:5433/sl"
    on_sqlite = rabbit.with_(database_url="sqlite:///sluice.db")
    alone = waker_for(on_sqlite)
    assert isinstance(alone, LocalWaker) and alone is not waker_for(on_sqlite)
    both = Settings.from_env(
        {"SLUICE_BROKER_URL": "amqp://127.0.0.1//", "SLUICE_WAKEUP_URL": "redis://h:6379/5"}
    )
    assert wakeup_url(both) == "redis://h:6379/5"
    assert isinstance(waker_for(both), RedisWaker)
    embedded = Settings(broker_url="memory://", embedded_broker=True, namespace="e")
    assert waker_for(embedded) is waker_for(embedded)
