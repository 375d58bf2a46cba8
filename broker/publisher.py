"""Publishing RunMessages to the workers' queues.

Invariants: the caller has already committed the `queued` state and the
`attempt_id` of every message (publish after commit); the Celery task id is the
`attempt_id`, so a republished message is the same try. The TI's span travels
in the message headers (W3C `traceparent`, by OTEL_PROPAGATORS) so the worker's
spans are its children, whoever publishes and whatever span is current there
(`broker.trace_headers`), and so does the deployment it comes from (header
`sluice_deployment`: the id in `app.conf.sluice_deployment`, set by whoever made the
app, `core.deployment`). Each message is shadowed as `dag_id.task_id` (Celery's
`shadow` option: the name Flower and worker logs show; the task run stays
`sluice.run_task_instance`). A batch goes through one producer (one connection
checkout) and, on Redis, pipelines (kombu's `Producer.batch`) of 1, 2, 4, 8… messages:
a few round trips for the lot instead of one per message, and the first message lands
as soon as it is built, so the workers start while the rest are built (128 messages
took a pool process 30-60 ms to build as one pipeline, the workers idle meanwhile; a
single message goes out alone). Broker errors
propagate: the caller decides (the queued sweep republishes what never arrived, a
delivered message included: the worker's claim takes a try once).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlparse

from celery import Celery

from sluice.broker.app import settings_of
from sluice.broker.queues import CALLBACK_TASK_NAME, RUN_TASK_NAME, celery_queue
from sluice.broker.trace_headers import HeadersLast, carrying
from sluice.scheduler.core.deployment import HEADER as DEPLOYMENT_HEADER
from sluice.scheduler.core.messages import CallbackMessage, RunMessage


def publish(app: Celery, messages: Sequence[RunMessage]) -> None:
    """Send every message to its namespaced queue through one producer."""
    if not messages:
        return
    namespace = settings_of(app).namespace
    declare: list[Any] | None = [] if _lists_are_queues(app) else None
    deployment = app.conf.get(DEPLOYMENT_HEADER)
    ours = {DEPLOYMENT_HEADER: deployment} if deployment else {}
    with app.producer_or_acquire() as producer, _batch(producer, len(messages)) as batch:
        sender = HeadersLast(producer)
        for sent, message in enumerate(messages):
            if batch is not None and sent and not sent & (sent + 1):
                batch.flush()  # after 1, 3, 7, 15… messages: chunks of 1, 2, 4, 8…
            kwargs = message.to_kwargs()
            with carrying(sender, message.trace) as trace_headers:
                headers = {**ours, **trace_headers} if trace_headers else ours or None
                app.send_task(
                    RUN_TASK_NAME,
                    kwargs=kwargs,
                    argsrepr="()",
                    kwargsrepr=repr(kwargs),  # plain JSON types: Celery's saferepr is not needed
                    declare=declare,
                    task_id=message.attempt_id,
                    queue=celery_queue(namespace, message.queue),
                    producer=sender,
                    shadow=f"{message.dag_id}.{message.task_id}",
                    headers=headers,
                )


def publish_callbacks(app: Celery, messages: Sequence[CallbackMessage]) -> None:
    """Send every due callback's message to the callback queue through one producer (the
    Celery task id is the callback's token, as a try's is its attempt id)."""
    if not messages:
        return
    settings = settings_of(app)
    queue = celery_queue(settings.namespace, settings.callback_queue)
    declare: list[Any] | None = [] if _lists_are_queues(app) else None
    deployment = app.conf.get(DEPLOYMENT_HEADER)
    headers = {DEPLOYMENT_HEADER: deployment} if deployment else None
    with app.producer_or_acquire() as producer, producer.batch():
        for message in messages:
            kwargs = message.to_kwargs()
            app.send_task(
                CALLBACK_TASK_NAME,
                kwargs=kwargs,
                argsrepr="()",
                kwargsrepr=repr(kwargs),
                declare=declare,
                task_id=message.token,
                queue=queue,
                producer=producer,
                headers=headers,
            )


def _batch(producer: Any, count: int) -> Any:
    """kombu's publish batch for several messages (on Redis, a pipeline until flushed); one
    message goes out alone: a batch of one costs a MULTI and an EXEC more."""
    return producer.batch() if count > 1 else contextlib.nullcontext()


_LIST_BROKERS = ("redis", "rediss", "sentinel", "memory")


@functools.lru_cache(maxsize=16)
def _lists_are_queues(app: Celery) -> bool:
    """Whether `app`'s broker delivers to a queue that was never declared (a Redis list,
    kombu's memory transport): Celery sends to a direct queue through the anonymous
    exchange, so declaring it again at every publish (its default) is only cost there.
    An AMQP broker drops a message to an undeclared queue: Celery declares it."""
    return urlparse(str(app.conf.broker_url)).scheme in _LIST_BROKERS
