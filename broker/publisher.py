"""Publishing RunMessages to the workers' queues.

Invariants: the caller has already committed the `queued` state and the
`attempt_id` of every message (publish after commit); the Celery task id is the
`attempt_id`, so a republished message is the same try. The TI's span travels
in the message headers (W3C `traceparent`, by OTEL_PROPAGATORS) so the worker's
spans are its children. Each message is shadowed as `dag_id.task_id` (Celery's `shadow`
option: the name Flower and worker logs show; the task run stays
`sluice.run_task_instance`). A batch goes through one
producer (one connection checkout). Broker errors propagate: the caller decides
(the queued sweep republishes what never arrived).
"""

from __future__ import annotations

from collections.abc import Sequence

from celery import Celery

from broker.app import settings_of
from broker.messages import RunMessage
from broker.queues import RUN_TASK_NAME, celery_queue
from scheduler.tracing import context_headers


def publish(app: Celery, messages: Sequence[RunMessage]) -> None:
    """Send every message to its namespaced queue through one producer."""
    if not messages:
        return
    namespace = settings_of(app).namespace
    with app.producer_or_acquire() as producer:
        for message in messages:
            app.send_task(
                RUN_TASK_NAME,
                kwargs=message.to_kwargs(),
                task_id=message.attempt_id,
                queue=celery_queue(namespace, message.queue),
                producer=producer,
                shadow=f"{message.dag_id}.{message.task_id}",
                headers=context_headers(message.trace) if message.trace else None,
            )
