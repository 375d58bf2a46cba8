"""Publishing a batch of RunMessages on a real Redis: every message lands once, and the
first ones land while the rest are still being built."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from sluice.broker.app import create_app
from sluice.broker.publisher import publish
from sluice.broker.queues import celery_queue
from sluice.scheduler.core.messages import RunMessage
from sluice.scheduler.core.settings import Settings
from tests.conftest import close_celery_app


def _message(i: int) -> RunMessage:
    return RunMessage(
        ti_id=i,
        attempt_id=str(uuid.uuid4()),
        dag_id="etl",
        run_id="manual__1",
        task_id=f"t{i}",
        try_number=1,
        queue="default",
    )


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    c = redis.Redis.from_url(redis_url)
    yield c
    c.close()


def test_a_batch_goes_out_in_growing_chunks_while_it_is_built(
    redis_url: str, client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given 40 messages for one queue and the queue's length seen as each message is built
    settings = Settings(database_url="unused://", broker_url=redis_url, namespace="pubtest")
    app = create_app(settings)
    queue = celery_queue("pubtest", "default")
    messages = [_message(i) for i in range(40)]
    seen: list[int] = []
    to_kwargs = RunMessage.to_kwargs

    def watched(self: RunMessage) -> dict[str, Any]:
        seen.append(int(client.llen(queue)))
        return to_kwargs(self)

    monkeypatch.setattr(RunMessage, "to_kwargs", watched)
    try:
        # When they are published in one call
        publish(app, messages)
    finally:
        close_celery_app(app)

    # Then the workers could start on the first message before the second was built, and
    # each later chunk (1, 2, 4, 8, 16 messages) was in the queue before the next began
    assert seen[:2] == [0, 1]
    assert [seen[i] for i in (1, 3, 7, 15, 31)] == [1, 3, 7, 15, 31]
    assert seen == sorted(seen)
    # and every message is there exactly once, as its own Celery task
    bodies = [json.loads(raw) for raw in client.lrange(queue, 0, -1)]
    ids = [body["headers"]["id"] for body in bodies]
    assert sorted(ids) == sorted(m.attempt_id for m in messages)


def test_one_message_and_a_pair_are_published(redis_url: str, client: redis.Redis) -> None:
    settings = Settings(database_url="unused://", broker_url=redis_url, namespace="pubtest")
    app = create_app(settings)
    queue = celery_queue("pubtest", "default")
    try:
        publish(app, [_message(1)])
        publish(app, [_message(2), _message(3)])
    finally:
        close_celery_app(app)
    assert client.llen(queue) == 3
