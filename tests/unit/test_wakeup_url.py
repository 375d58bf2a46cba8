"""Which waker a process gets: the embedded one, Redis (the broker's or
`SLUICE_WAKEUP_URL`), or one of its own process when there is no Redis to go through."""

from __future__ import annotations

from sluice.broker.wakeup import LocalWaker, RedisWaker, waker_for, wakeup_url
from sluice.scheduler.core.settings import Settings


def test_the_waker_follows_the_broker_and_the_setting() -> None:
    redis = Settings(broker_url="redis://127.0.0.1:6379/3", namespace="n")
    assert wakeup_url(redis) == "redis://127.0.0.1:6379/3"
    waker = waker_for(redis)
    assert isinstance(waker, RedisWaker) and waker.channel == "n:3:wakeup"
    rabbit = Settings(broker_url="amqp://guest:guest@127.0.0.1:5672/v", namespace="n")
    assert wakeup_url(rabbit) is None
    alone = waker_for(rabbit)
    assert isinstance(alone, LocalWaker) and alone is not waker_for(rabbit)
    both = Settings.from_env(
        {"SLUICE_BROKER_URL": "amqp://127.0.0.1//", "SLUICE_WAKEUP_URL": "redis://h:6379/5"}
    )
    assert wakeup_url(both) == "redis://h:6379/5"
    assert isinstance(waker_for(both), RedisWaker)
    embedded = Settings(broker_url="memory://", embedded_broker=True, namespace="e")
    assert waker_for(embedded) is waker_for(embedded)
