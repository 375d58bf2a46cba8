"""``CeleryTask``: call an existing Celery task by name, and wait for it without a worker slot.

Contract:

* The Sluice worker that claims the try resolves ``args``/``kwargs`` against the upstream
  results, sends ``name`` with them through a Celery app (``app.send_task``) under the
  Celery task id ``external_id_for(attempt_id)``, records that id on the TaskInstance and
  returns at once: the TI stays ``running`` while the external task runs. A poller on the
  scheduler side (``scheduler.jobs.celery_poller``) reads its state from the Celery result
  backend and writes the TI's outcome. So a CeleryTask needs a result backend that the
  user's Celery workers write to and Sluice reads (``SLUICE_RESULT_BACKEND``).
* An argument may refer to an upstream task's result, anywhere inside ``args``/``kwargs``
  (lists and dicts are walked): the marker ``Upstream("extract")``, or a string that is
  exactly ``"{{ upstream.extract }}"`` (whitespace inside the braces optional). Either is
  replaced by the JSON value ``extract`` returned. The referenced task must be an upstream
  of this one (link it with ``>>``); otherwise the try fails with a clear error.
* Everything else in ``args``/``kwargs`` must be JSON (it is serialized with the DAG).
* ``timeout`` counts from the start of the try (the TI's ``start_date``); past it the
  external task is revoked and the try fails (or is retried, by ``retries``).
* ``celery_queue`` is the Celery queue the external task is sent to; None (the default)
  leaves routing to the sending app (its ``task_routes``, then its default queue). Set it
  when Sluice's own workers send the task, whose default queue is a Sluice queue.

This module imports no Celery: the app that sends is passed in (duck-typed). The
references are `sluice.tasks.arguments`'s.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from sluice.tasks.arguments import Upstream, resolve, to_json
from sluice.tasks.dag import DAG
from sluice.tasks.errors import DagDefinitionError
from sluice.tasks.task import Task, _as_timedelta

__all__ = ["CeleryTask", "Upstream", "external_id_for", "resolve", "to_json"]

_EXTERNAL_NS = uuid.UUID("6d1c3c5e-6a55-4d5b-9a6e-3b8f1f4c2a10")


def external_id_for(attempt_id: str) -> str:
    """The Celery task id of the external task sent by try ``attempt_id`` (deterministic).

    The poller trusts a TI's ``external_id`` only when it matches its current attempt, so
    a new try never reads the result of an earlier one.
    """
    return str(uuid.uuid5(_EXTERNAL_NS, attempt_id))


class CeleryTask(Task):
    """A task that runs the existing Celery task ``name``; see the module docstring."""

    kind = "celery"

    def __init__(
        self,
        task_id: str,
        name: str,
        args: list[Any] | tuple[Any, ...] | None = None,
        kwargs: dict[str, Any] | None = None,
        timeout: timedelta | float | None = None,
        celery_queue: str | None = None,
        *,
        dag: DAG | None = None,
        **options: Any,
    ) -> None:
        if not isinstance(name, str) or not name.strip():
            raise DagDefinitionError(f"celery task '{task_id}' needs the Celery task name")
        if kwargs is not None and not isinstance(kwargs, dict):
            raise DagDefinitionError(f"celery task '{task_id}': kwargs must be a dict")
        if args is not None and not isinstance(args, list | tuple):
            raise DagDefinitionError(f"celery task '{task_id}': args must be a list")
        try:
            limit = _as_timedelta("timeout", timeout, optional=True, positive=True)
        except DagDefinitionError as exc:
            raise DagDefinitionError(f"celery task '{task_id}': {exc}") from None
        super().__init__(task_id, dag=dag, **options)
        self.name = name
        self.args: list[Any] = list(args or [])
        self.kwargs: dict[str, Any] = dict(kwargs or {})
        self.timeout: timedelta | None = limit
        self.celery_queue = celery_queue

    def send(self, app: Any, upstream: Mapping[str, Any], attempt_id: str, **options: Any) -> str:
        """Send the external task through Celery app ``app``; return its Celery task id.

        ``options`` go to ``app.send_task`` as they are (the worker passes the producer
        and the message headers that carry the TI's span).
        """
        external_id = external_id_for(attempt_id)
        options["task_id"] = external_id
        if self.celery_queue:
            options["queue"] = self.celery_queue
        app.send_task(
            self.name,
            args=resolve(self.args, upstream, self.task_id),
            kwargs=resolve(self.kwargs, upstream, self.task_id),
            **options,
        )
        return external_id
