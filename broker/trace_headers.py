"""Each message a Sluice worker or scheduler sends carries its TI's own span context.

Where opentelemetry-instrumentation-celery is installed (a Sluice worker, the embedded
broker, a user's instrumented app), its `before_task_publish` receiver opens a publish
span under the *current* context and writes that span's context into the message
headers. A task queued by a worker is published from inside the previous task's worker
span, so without the two measures below the next task's work would nest under the
previous task's worker span (and a publish outside any span would start a trace of its
own):

- while the message is sent, the TI's span is the current context (`carrying`), so a
  publish span, if one is made, is a child of the TI's span and goes no further;
- the producer writes the message's own headers last (`HeadersLast`), after every
  `before_task_publish` receiver whatever the order they were connected in, so the span
  that travels to the worker is the TI's.

The worker reads it back from the request (`incoming_carrier`), so what the task itself
sends on (a `CeleryTask`'s external task) nests under the same TI span.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import propagate
from opentelemetry.propagators.textmap import Getter

from sluice.scheduler.core.tracing import carrier_of, context_headers, parent_context


class HeadersLast:
    """A kombu `Producer` that publishes with `headers` written over the message's own.

    Everything but `publish` is the wrapped producer's (Celery reads its connection and
    channel). `headers` is set by `carrying` for the one message being sent.
    """

    __slots__ = ("_producer", "headers")

    def __init__(self, producer: Any) -> None:
        self._producer = producer
        self.headers: dict[str, str] | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._producer, name)

    def publish(self, body: Any, **kwargs: Any) -> Any:
        if self.headers:
            kwargs["headers"] = {**(kwargs.get("headers") or {}), **self.headers}
        return self._producer.publish(body, **kwargs)


@contextmanager
def carrying(sender: HeadersLast, carrier: Mapping[str, Any]) -> Iterator[dict[str, str] | None]:
    """While one message of the TI whose span is in `carrier` is sent through `sender`:
    that span is the current context, and `sender` writes its headers last. Yields the
    headers to give `send_task` (None when the carrier holds no span)."""
    context = parent_context(carrier)
    if context is None:
        yield None
        return
    headers = context_headers(carrier)
    sender.headers = headers
    token = otel_context.attach(context)
    try:
        yield headers
    finally:
        # also drops a publish span the instrumentation left current (it never ends
        # the span of a task name not registered in this process)
        otel_context.detach(token)
        sender.headers = None


class _RequestGetter(Getter[Any]):
    """Reads propagation headers from a Celery request (they are its attributes)."""

    def get(self, carrier: Any, key: str) -> list[str] | None:
        value = getattr(carrier, key, None)
        return [value] if isinstance(value, str) else None

    def keys(self, carrier: Any) -> list[str]:
        return []


_GETTER = _RequestGetter()


def incoming_carrier(request: Any) -> dict[str, str]:
    """The TI span a worker's Celery `request` was published under, as stored; {} if none."""
    return carrier_of(propagate.extract(request, getter=_GETTER))
