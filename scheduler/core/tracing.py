"""Tracing: the one module that talks to the OpenTelemetry SDK.

Model (docs/architecture.md, Tracing): every DagRun and TaskInstance gets its trace and
span ids when it is created (`scheduler.core.tracing_ids`), stored as a W3C
`traceparent` in `context_carrier`. A span is exported once, when it ends,
with those stored ids and its stored start time, so any process can emit it
(or re-create it after its owner died) and the children that workers already
exported stay attached. The SDK picks ids through `_PresetIds`, which hands out
the stored ids for the span being emitted.

Tracing is on when the standard variables configure an exporter
(`OTEL_TRACES_EXPORTER`, `OTEL_EXPORTER_OTLP_ENDPOINT`,
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`); off, `Tracing.enabled` is False and
callers skip all span bookkeeping.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.status import Status, StatusCode

log = logging.getLogger(__name__)


def tracing_configured(env: Mapping[str, str] | None = None) -> bool:
    env = os.environ if env is None else env
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter == "none" or env.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    return bool(
        exporter
        or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    )


class _PresetIds(RandomIdGenerator):
    """Random ids, except for the span being emitted, which gets its stored ids."""

    def __init__(self) -> None:
        self._local = threading.local()

    @contextmanager
    def preset(self, trace_id: int, span_id: int) -> Iterator[None]:
        self._local.trace_id, self._local.span_id = trace_id, span_id
        try:
            yield
        finally:
            self._local.trace_id = self._local.span_id = None

    def generate_trace_id(self) -> int:
        value = getattr(self._local, "trace_id", None)
        return value if value else super().generate_trace_id()

    def generate_span_id(self) -> int:
        value = getattr(self._local, "span_id", None)
        if value:
            self._local.span_id = None
            return int(value)
        return super().generate_span_id()


def _exporter(env: Mapping[str, str]) -> SpanExporter:
    kind = env.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() or "otlp"
    if kind == "console":
        return ConsoleSpanExporter()
    protocol = (
        env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    )
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpExporter,
    )

    return HttpExporter()


class Tracing:
    """The process's tracer, or a disabled stand-in that costs nothing."""

    def __init__(self, service_name: str, env: Mapping[str, str] | None = None) -> None:
        env = os.environ if env is None else env
        self.enabled = tracing_configured(env)
        self.provider: TracerProvider | None = None
        self._ids = _PresetIds()
        if not self.enabled:
            return
        resource = Resource.create({"service.name": env.get("OTEL_SERVICE_NAME") or service_name})
        self.provider = TracerProvider(resource=resource, id_generator=self._ids)
        self.provider.add_span_processor(BatchSpanProcessor(_exporter(env)))
        self.tracer = self.provider.get_tracer("sluice")

    def install_global(self) -> None:
        """Make this the provider of the plain OpenTelemetry API (for task code)."""
        if self.provider is not None:
            trace.set_tracer_provider(self.provider)

    def emit(
        self,
        name: str,
        *,
        trace_id: str,
        span_id: str,
        parent_id: str | None,
        start: dt.datetime,
        end: dt.datetime,
        attributes: Mapping[str, Any],
        error: bool = False,
    ) -> None:
        """Export one finished span with the given ids and times."""
        if self.provider is None:
            return
        context = Context()
        if parent_id:
            parent = SpanContext(
                int(trace_id, 16),
                int(parent_id, 16),
                is_remote=True,
                trace_flags=TraceFlags(TraceFlags.SAMPLED),
            )
            context = trace.set_span_in_context(NonRecordingSpan(parent), context)
        attrs = {k: v for k, v in attributes.items() if v is not None}
        with self._ids.preset(int(trace_id, 16), int(span_id, 16)):
            span = self.tracer.start_span(
                name,
                context=context,
                kind=SpanKind.INTERNAL,
                attributes=attrs,
                start_time=_ns(start),
            )
        if error:
            span.set_status(Status(StatusCode.ERROR))
        span.end(end_time=_ns(max(end, start)))

    def flush(self, timeout_ms: int = 10_000) -> None:
        if self.provider is not None:
            self.provider.force_flush(timeout_ms)

    def shutdown(self) -> None:
        if self.provider is not None:
            self.provider.shutdown()


def _ns(value: dt.datetime) -> int:
    return int(value.timestamp() * 1_000_000_000)


def parent_context(carrier: Mapping[str, Any]) -> Context | None:
    """A context whose current span is the one stored in `carrier` (None without one)."""
    parent = carrier.get("traceparent")
    if not parent:
        return None
    _, trace_id, span_id, _ = parent.split("-")
    span_context = SpanContext(
        int(trace_id, 16),
        int(span_id, 16),
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )
    return trace.set_span_in_context(NonRecordingSpan(span_context))


def context_headers(carrier: Mapping[str, Any]) -> dict[str, str]:
    """Message headers that make the span in `carrier` the parent, by OTEL_PROPAGATORS."""
    context = parent_context(carrier)
    headers: dict[str, str] = {}
    if context is not None:
        propagate.inject(headers, context=context)
    return headers


def carrier_of(context: Context) -> dict[str, str]:
    """The stored form (a W3C `traceparent`) of `context`'s current span; {} if none."""
    span_context = trace.get_current_span(context).get_span_context()
    if not span_context.is_valid:
        return {}
    return {"traceparent": f"00-{span_context.trace_id:032x}-{span_context.span_id:016x}-01"}
