"""Worker-side tracing: Celery instrumented after fork, spans annotated with Sluice ids.

The TI's span context arrives in the message headers (`broker.publisher`, which
makes it win over the instrumentation's own publish span: `broker.trace_headers`);
opentelemetry-instrumentation-celery extracts it, so the worker's `run/…` span
and every span the task code makes with the plain OpenTelemetry API are
children of the TI span, with no Sluice code in the task. Set up once per
process: in each prefork child at `worker_process_init`, or at `worker_init`
for the threads and solo pools. Off unless the OTEL_* variables configure an
exporter.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from celery.signals import worker_init, worker_process_init, worker_process_shutdown
from opentelemetry import propagate, trace

from sluice.broker.queues import RUN_TASK_NAME
from sluice.scheduler.core.messages import RunMessage
from sluice.scheduler.core.tracing import Tracing, context_headers, tracing_configured

log = logging.getLogger(__name__)

_installed: dict[int, Tracing] = {}


def instrument_celery(tracing: Tracing) -> None:
    """Instrument Celery in this process with `tracing`'s provider (idempotent per process)."""
    if not tracing.enabled or os.getpid() in _installed:
        return
    from opentelemetry.instrumentation.celery import CeleryInstrumentor

    tracing.install_global()
    CeleryInstrumentor().instrument(tracer_provider=tracing.provider)
    _installed[os.getpid()] = tracing


def setup_worker_tracing() -> None:
    if tracing_configured() and os.getpid() not in _installed:
        instrument_celery(Tracing("sluice-worker"))
        log.info("tracing on in worker process %s", os.getpid())


def annotate(msg: RunMessage, **extra: Any) -> None:
    """Put Sluice's ids on the span the worker is in (the Celery `run/…` span)."""
    span = trace.get_current_span()
    if not span.is_recording():
        return
    span.set_attributes(
        {
            "dag_id": msg.dag_id,
            "run_id": msg.run_id,
            "task_id": msg.task_id,
            "try_number": msg.try_number,
            "attempt_id": msg.attempt_id,
            "queue": msg.queue,
            **{k: v for k, v in extra.items() if v is not None},
        }
    )


@worker_process_init.connect
def _on_process_init(**_: Any) -> None:
    setup_worker_tracing()


@worker_init.connect
def _on_worker_init(sender: Any = None, **_: Any) -> None:
    pool = getattr(sender, "pool_cls", None)
    name = getattr(pool, "__module__", str(pool or ""))
    if "prefork" not in name:  # prefork children set up their own after fork
        setup_worker_tracing()


@worker_process_shutdown.connect
def _on_process_shutdown(**_: Any) -> None:
    tracing = _installed.get(os.getpid())
    if tracing is not None:
        tracing.shutdown()


@contextmanager
def run_span(msg: RunMessage) -> Iterator[None]:
    """A span for running `msg` outside Celery (a local backfill), child of the TI span."""
    if not msg.trace or not tracing_configured():
        yield
        return
    parent = propagate.extract(context_headers(msg.trace))
    tracer = trace.get_tracer("sluice.worker")
    with tracer.start_as_current_span(f"run/{RUN_TASK_NAME}", context=parent):
        annotate(msg)
        yield
