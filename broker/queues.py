"""Queue names and task names on the wire.

A Sluice queue `q` is the Celery queue `"<namespace>.<q>"`, so that deployments
sharing one Redis keep their work apart. Routing is by the `queue=` given at
publish time; Celery creates a direct exchange and binding of the same name.
"""

from __future__ import annotations

RUN_TASK_NAME = "sluice.run_task_instance"
"""The Celery task name of the worker-side runner (see `broker.worker.task`)."""

CALLBACK_TASK_NAME = "sluice.run_callback"
"""The Celery task name of the worker-side callback runner (`broker.worker.callbacks`)."""

DEFAULT_QUEUE = "default"


def celery_queue(namespace: str, queue: str) -> str:
    """The Celery queue that carries Sluice queue `queue` ("default" -> "sluice.default")."""
    return f"{namespace}.{queue}"
