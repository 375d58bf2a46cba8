"""Trace and span ids allocated when a DagRun or TaskInstance is created.

They are stored as a W3C `traceparent` in `context_carrier`, so every process
that later emits or re-creates the span uses the same ids (see docs/architecture.md,
Tracing). Ids come from `secrets`, as the OpenTelemetry SDK's generator does.
"""

from __future__ import annotations

import secrets


def _hex(nbytes: int) -> str:
    while True:
        value = secrets.token_hex(nbytes)
        if int(value, 16):
            return value


def new_carrier(trace_id: str | None = None) -> dict[str, str]:
    """A carrier with a fresh span id, in `trace_id` (or a fresh trace when None)."""
    trace = trace_id or _hex(16)
    return {"traceparent": f"00-{trace}-{_hex(8)}-01"}


def trace_id_of(carrier: dict[str, str]) -> str | None:
    parent = carrier.get("traceparent")
    return parent.split("-")[1] if parent else None
