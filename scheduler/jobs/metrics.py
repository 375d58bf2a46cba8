"""Scheduler metrics through OpenTelemetry: a Prometheus text endpoint and/or OTLP.

Off by default. `SchedulerMetrics` is enabled when a Prometheus port is given
(`sluice scheduler --metrics-port N`; or `OTEL_METRICS_EXPORTER=prometheus`, on
`OTEL_EXPORTER_PROMETHEUS_PORT`, default 9464) or when the standard variables
configure an exporter (`OTEL_METRICS_EXPORTER=otlp|console`, or unset with
`OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`;
`OTEL_METRICS_EXPORTER=none` or `OTEL_SDK_DISABLED=true` turn it off). Disabled,
every method returns at once and the SDK is not even imported.

The scheduler loop calls `record_tick(result, seconds)` after each tick and
`observe_queued(messages, now)` after each queueing commit; `shutdown()` on exit.

Invariants:
- Metrics only read the database, each read in a short session of its own; they
  never write and never fail the loop (errors are logged).
- Gauges (TIs by state and queue, pool slots used/free) are queried when a
  reader collects (a scrape, an OTLP export), not in the loop.
- Queued → running delay needs no worker change: the TIs this scheduler queued
  are remembered (id, attempt_id, queued_at; at most `MAX_PENDING`) and looked up
  by primary key at most every `sample_interval` seconds; a TI counts once, when
  the database shows its attempt started. Each scheduler reports the TIs it queued.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from sluice.scheduler.core.db import utcnow
from sluice.scheduler.core.messages import RunMessage
from sluice.scheduler.core.models import Pool, TaskInstance, Trigger
from sluice.scheduler.core.queries.callbacks import counts as callback_counts
from sluice.scheduler.core.queries.tis import used_slots_by_pool
from sluice.scheduler.core.settings import ConfigError, Settings
from sluice.scheduler.core.states import TI, TI_UNFINISHED
from sluice.scheduler.jobs.tick import TickResult

log = logging.getLogger(__name__)

MAX_PENDING = 10_000
"""Queued TIs remembered for the queued → running delay; the oldest are dropped first."""

SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
COUNT_BUCKETS = (0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)


def metrics_exporters(env: Mapping[str, str]) -> set[str]:
    """The exporters the standard variables ask for: a subset of otlp, console, prometheus."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return set()
    raw = env.get("OTEL_METRICS_EXPORTER", "").strip().lower()
    names = {n.strip() for n in raw.split(",") if n.strip()}
    if "none" in names:
        return set()
    if not names and (
        env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
    ):
        names = {"otlp"}
    return names & {"otlp", "console", "prometheus"}


def _push_exporter(kind: str, env: Mapping[str, str]) -> Any:
    """A console or OTLP exporter; the endpoint is taken from `env`, other options from
    the process environment (headers, certificates, timeouts: the exporter reads them)."""
    if kind == "console":
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

        return ConsoleMetricExporter()
    protocol = (
        env.get("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL")
        or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    )
    endpoint = env.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
    base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter

        return OTLPMetricExporter(endpoint=endpoint or base or None)
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
        OTLPMetricExporter as HttpExporter,
    )

    if endpoint is None and base:
        endpoint = base.rstrip("/") + "/v1/metrics"
    return HttpExporter(endpoint=endpoint)


class SchedulerMetrics:
    """The scheduler's instruments, or a disabled stand-in that costs nothing."""

    def __init__(
        self,
        settings: Settings,
        factory: sessionmaker[Session],
        port: int | None = None,
        *,
        host: str = "127.0.0.1",
        env: Mapping[str, str] | None = None,
        service_name: str = "sluice-scheduler",
    ) -> None:
        env = os.environ if env is None else env
        self.settings = settings
        self.factory = factory
        self.sample_interval = 1.0
        self.port: int | None = None
        self._server: Any = None
        self._provider: Any = None
        self._pending: dict[int, tuple[str, dt.datetime]] = {}
        self._last_sample = float("-inf")
        self._queues_seen: set[str] = set()
        self._pool_cache: tuple[float, dict[str, tuple[int, int]]] = (float("-inf"), {})
        exporters = metrics_exporters(env)
        if port is None and "prometheus" in exporters:
            port = int(env.get("OTEL_EXPORTER_PROMETHEUS_PORT") or 9464)
            host = env.get("OTEL_EXPORTER_PROMETHEUS_HOST") or host
        push = sorted(exporters - {"prometheus"})
        self.enabled = port is not None or bool(push)
        if self.enabled:
            self._start(port, host, push, env, service_name)

    @classmethod
    def disabled(cls) -> SchedulerMetrics:
        """A stand-in whose every method does nothing (no settings, no database)."""
        return cls(Settings(), sessionmaker(), None, env={})

    # -- set-up ------------------------------------------------------------------------------
    def _start(
        self,
        port: int | None,
        host: str,
        push: Sequence[str],
        env: Mapping[str, str],
        service_name: str,
    ) -> None:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource

        readers: list[MetricReader] = []
        if port is not None:
            readers.append(self._prometheus(port, host))
        readers += [PeriodicExportingMetricReader(_push_exporter(kind, env)) for kind in push]
        resource = Resource.create({"service.name": env.get("OTEL_SERVICE_NAME") or service_name})
        self._provider = MeterProvider(metric_readers=readers, resource=resource)
        self._instruments(self._provider.get_meter("sluice.scheduler"))
        log.info(
            "metrics on: %s",
            ", ".join(
                [*([f"prometheus on {host}:{self.port}"] if port is not None else []), *push]
            ),
        )

    def _prometheus(self, port: int, host: str) -> Any:
        """A Prometheus reader on a registry of its own, served by prometheus_client."""
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from prometheus_client import CollectorRegistry, start_http_server

        registry = CollectorRegistry(auto_describe=True)
        reader = PrometheusMetricReader(registry=registry)
        try:
            server, _thread = start_http_server(port, addr=host, registry=registry)
        except OSError as exc:
            raise ConfigError(f"cannot serve metrics on {host}:{port}: {exc}") from None
        self._server = server
        self.port = int(server.server_port)
        return reader

    def _instruments(self, meter: Any) -> None:
        from opentelemetry.metrics import CallbackOptions, Observation

        def seconds(name: str, description: str) -> Any:
            return meter.create_histogram(
                name, "s", description, explicit_bucket_boundaries_advisory=SECONDS_BUCKETS
            )

        def per_loop(name: str, description: str) -> Any:
            return meter.create_histogram(
                name, "1", description, explicit_bucket_boundaries_advisory=COUNT_BUCKETS
            )

        self.loop_duration = seconds("sluice.scheduler.loop.duration", "one loop iteration")
        self.runs_examined = per_loop("sluice.scheduler.loop.runs_examined", "runs per loop")
        self.tis_queued = per_loop("sluice.scheduler.loop.tis_queued", "TIs queued per loop")
        self.schedule_delay = seconds(
            "sluice.task_instance.schedule_delay", "scheduled_at to queued_at of queued TIs"
        )
        self.start_delay = seconds(
            "sluice.task_instance.queued_to_running", "queued_at to start_date of started TIs"
        )
        self.counters = {
            field: meter.create_counter(f"sluice.scheduler.{name}", "1", description)
            for field, name, description in (
                ("loops", "loops", "loop iterations"),
                ("runs_created", "runs.created", "DagRuns created"),
                ("runs_started", "runs.started", "DagRuns moved queued to running"),
                ("runs_finished", "runs.finished", "DagRuns finished"),
                ("tis_scheduled", "tis.scheduled", "TIs moved to scheduled"),
                ("tis_queued", "tis.queued", "TIs queued"),
                ("dead_jobs", "dead_jobs", "jobs found dead and released"),
                ("dead_tis", "dead_tis", "running TIs found without heartbeat"),
                ("tis_requeued", "messages.republished", "queued TIs published again"),
                ("mapped_expansions", "mapped.expansions", "mapped tasks given their indexes"),
                ("tis_expanded", "tis.expanded", "indexes of mapped tasks asked for"),
            )
        }
        for counter in self.counters.values():
            counter.add(0)  # every series exists from the start, so rate() works at once

        def observe_tis(_: CallbackOptions) -> Iterable[Observation]:
            return [Observation(n, attrs) for attrs, n in self._ti_counts()]

        def observe_used(_: CallbackOptions) -> Iterable[Observation]:
            return [Observation(u, {"pool": p}) for p, (u, _f) in self._pool_slots().items()]

        def observe_free(_: CallbackOptions) -> Iterable[Observation]:
            return [Observation(f, {"pool": p}) for p, (_u, f) in self._pool_slots().items()]

        meter.create_observable_gauge(
            "sluice.task_instances", [observe_tis], "1", "unfinished TIs by state and queue"
        )
        meter.create_observable_gauge(
            "sluice.pool.slots.used", [observe_used], "1", "slots of queued and running TIs"
        )
        meter.create_observable_gauge(
            "sluice.pool.slots.free", [observe_free], "1", "slots left in each pool"
        )

        def observe_callbacks(_: CallbackOptions) -> Iterable[Observation]:
            return [Observation(n, {"status": s}) for s, n in self._callback_counts().items()]

        meter.create_observable_gauge(
            "sluice.callbacks",
            [observe_callbacks],
            "1",
            "callbacks by status: pending, queued, running, delivered, failed",
        )

        def observe_triggers(_: CallbackOptions) -> Iterable[Observation]:
            return [Observation(n, {"triggerer": t}) for t, n in self._trigger_counts().items()]

        meter.create_observable_gauge(
            "sluice.triggers",
            [observe_triggers],
            "1",
            "triggers of deferred TIs by the triggerer job running them ('none': waiting)",
        )

    # -- what the loop calls -----------------------------------------------------------------
    def record_tick(self, result: TickResult, seconds: float) -> None:
        """After each tick: its duration and counts; now and then, queued → running delays.

        Counters are read from `result` by field name; a field TickResult lacks (e.g.
        `dead_jobs` before it is added) counts as 0.
        """
        if not self.enabled:
            return
        self.loop_duration.record(seconds)
        self.runs_examined.record(result.runs_examined)
        self.tis_queued.record(result.tis_queued)
        for field, counter in self.counters.items():
            value = 1 if field == "loops" else int(getattr(result, field, 0) or 0)
            if value:
                counter.add(value)
        if self._pending and time.monotonic() - self._last_sample >= self.sample_interval:
            self._last_sample = time.monotonic()
            self.collect_starts()

    def observe_queued(self, messages: Sequence[RunMessage], now: dt.datetime) -> None:
        """After a queueing commit: `now` is the TIs' queued_at; records scheduled → queued."""
        if not self.enabled or not messages:
            return
        for message in messages:
            self._pending.pop(message.ti_id, None)
            self._pending[message.ti_id] = (message.attempt_id, now)
        while len(self._pending) > MAX_PENDING:
            self._pending.pop(next(iter(self._pending)))
        ids = [m.ti_id for m in messages]
        try:
            with self.factory() as session:
                for chunk in _chunks(ids):
                    stmt = select(TaskInstance.scheduled_at).where(TaskInstance.id.in_(chunk))
                    for scheduled_at in session.scalars(stmt):
                        if scheduled_at is not None and scheduled_at <= now:
                            self.schedule_delay.record((now - scheduled_at).total_seconds())
        except Exception as exc:
            log.warning("metrics: reading scheduled_at failed: %s", _short(exc))

    def collect_starts(self) -> None:
        """Record queued → running for remembered TIs whose attempt has started."""
        if not self.enabled or not self._pending:
            return
        try:
            with self.factory() as session:
                for chunk in _chunks(list(self._pending)):
                    stmt = select(
                        TaskInstance.id,
                        TaskInstance.attempt_id,
                        TaskInstance.state,
                        TaskInstance.start_date,
                    ).where(TaskInstance.id.in_(chunk))
                    found = {row[0]: row[1:] for row in session.execute(stmt)}
                    for ti_id in chunk:
                        self._settle(ti_id, found.get(ti_id))
        except Exception as exc:
            log.warning("metrics: reading start dates failed: %s", _short(exc))

    def _settle(self, ti_id: int, row: Any) -> None:
        attempt_id, queued_at = self._pending[ti_id]
        if row is None or row[0] != attempt_id:
            del self._pending[ti_id]  # gone, cleared or queued again by someone else
            return
        state, start = row[1], row[2]
        if state == TI.QUEUED:
            return
        del self._pending[ti_id]
        if start is not None and start >= queued_at:
            self.start_delay.record((start - queued_at).total_seconds())

    def shutdown(self) -> None:
        """Flush push exporters and stop the HTTP endpoint."""
        if self._provider is not None:
            try:
                self._provider.shutdown()
            except Exception as exc:
                log.warning("metrics: shutdown failed: %s", exc)
            self._provider = None
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    # -- gauges, read at collection ----------------------------------------------------------
    def _ti_counts(self) -> list[tuple[dict[str, str], int]]:
        """Unfinished TIs by (state, queue); a zero for every state of each queue seen."""
        try:
            with self.factory() as session:
                rows = session.execute(
                    select(TaskInstance.queue, TaskInstance.state, func.count())
                    .where(TaskInstance.state.in_(list(TI_UNFINISHED)))
                    .group_by(TaskInstance.queue, TaskInstance.state)
                ).all()
        except Exception as exc:
            log.warning("metrics: counting task instances failed: %s", _short(exc))
            return []
        counts = {(queue, str(state)): int(n) for queue, state, n in rows}
        self._queues_seen.update(queue for queue, _ in counts)
        return [
            ({"state": str(state), "queue": queue}, counts.get((queue, str(state)), 0))
            for queue in sorted(self._queues_seen)
            for state in sorted(TI_UNFINISHED)
        ]

    def _callback_counts(self) -> dict[str, int]:
        """Callbacks by status (`core.queries.callbacks.counts`)."""
        try:
            with self.factory() as session:
                return callback_counts(session)
        except Exception as exc:
            log.warning("metrics: counting callbacks failed: %s", _short(exc))
            return {}

    def _trigger_counts(self) -> dict[str, int]:
        """Triggers by the triggerer job that leases them now; `none` for the others."""
        try:
            with self.factory() as session:
                rows = session.execute(
                    select(Trigger.triggerer_id, func.count())
                    .where(Trigger.lease_until > utcnow())
                    .group_by(Trigger.triggerer_id)
                ).all()
                waiting = session.scalar(select(func.count()).select_from(Trigger)) or 0
        except Exception as exc:
            log.warning("metrics: counting triggers failed: %s", _short(exc))
            return {}
        counts = {str(job): int(n) for job, n in rows if job is not None}
        counts["none"] = int(waiting) - sum(counts.values())
        return counts

    def _pool_slots(self) -> dict[str, tuple[int, int]]:
        """Pool → (used, free) slots, counted as `queue_scheduled` counts them.

        Both pool gauges read it in one collection: one query serves both.
        """
        at, cached = self._pool_cache
        if time.monotonic() - at < 0.5:
            return cached
        try:
            with self.factory() as session:
                slots = {name: n for name, n in session.execute(select(Pool.name, Pool.slots))}
                used = used_slots_by_pool(session)
        except Exception as exc:
            log.warning("metrics: counting pool slots failed: %s", _short(exc))
            return {}
        found = {
            name: (used.get(name, 0), max(total - used.get(name, 0), 0))
            for name, total in sorted(slots.items())
        }
        self._pool_cache = (time.monotonic(), found)
        return found


def _short(exc: Exception) -> str:
    """The driver's one-line message, without the SQL statement."""
    return " ".join(str(getattr(exc, "orig", None) or exc).split())[:300]


def _chunks(ids: Sequence[int], size: int = 1000) -> Iterable[Sequence[int]]:
    for i in range(0, len(ids), size):
        yield ids[i : i + size]
