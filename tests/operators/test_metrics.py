"""Scheduler metrics: a real tick against PostgreSQL, scraped from the Prometheus endpoint.

The endpoint listens on a port the OS picks (port 0). The loop's calls are made
here as SchedulerJob makes them: `record_tick` after `tick`, `observe_queued` with
the messages published. A worker's claim is made with `move_ti`, as a worker does.
"""

from __future__ import annotations

import datetime as dt
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sluice.broker.wakeup import LocalWaker
from sluice.scheduler.core.db import transaction
from sluice.scheduler.core.messages import RunMessage
from sluice.scheduler.core.models import DueCallback
from sluice.scheduler.core.states import TI
from sluice.scheduler.core.transitions import move_ti
from sluice.scheduler.jobs.base import TickResult
from sluice.scheduler.jobs.metrics import SchedulerMetrics, metrics_exporters
from sluice.scheduler.jobs.scheduler_job import SchedulerJob
from tests.operators.helpers import World
from tests.otlp_receiver import OtlpReceiver

WIDE = """
with DAG("wide", schedule=None) as dag:
    for name in ("t1", "t2", "t3"):
        task(task_id=name)(lambda: None)
"""


@pytest.fixture
def world(pg_url, tmp_path):
    folder = tmp_path / "dags"
    folder.mkdir()
    w = World(pg_url, folder, heartbeat_timeout=30, queued_timeout=60)
    yield w
    w.close()


def scrape(port: int) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Sample name → {sorted labels: value} of everything the endpoint serves."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = tuple(sorted((k, v) for k, v in s.labels.items() if k != "otel_scope_name"))
            samples.setdefault(s.name, {})[labels] = s.value
    return samples


def one(samples: dict, name: str, **labels: str) -> float:
    series = samples[name]
    matching = [v for k, v in series.items() if set(labels.items()) <= set(k)]
    assert len(matching) == 1, (name, labels, series)
    return matching[0]


def test_a_tick_with_real_work_shows_up_on_the_endpoint(world: World) -> None:
    # Given: a dead running TI and a long-unclaimed queued TI in run r0, and a new run r1
    world.dags(WIDE)
    world.trigger("wide", "r0")
    old = world.now - dt.timedelta(seconds=100)
    world.advance("wide", "r0", "t1", TI.RUNNING, at=old)
    stale = world.advance("wide", "r0", "t2", TI.QUEUED, at=old)
    world.trigger("wide", "r1", start=False)
    sent: list[RunMessage] = []
    job = SchedulerJob(
        world.settings, world.factory, sent.extend, LocalWaker(), clock=lambda: world.now
    )
    job.register()
    metrics = SchedulerMetrics(world.settings, world.factory, 0, host="127.0.0.1", env={})
    metrics.sample_interval = 0
    try:
        assert metrics.enabled and metrics.port
        # When: one tick, reported as the loop reports it
        started = time.perf_counter()
        result = job.tick(world.now)
        metrics.record_tick(result, time.perf_counter() - started)
        queued = [m for m in sent if m.ti_id != stale.id]  # not the re-published one
        metrics.observe_queued(queued, world.now)
        # ... and a worker claims one of them half a second later
        claimed = queued[0]
        with transaction(world.factory) as session:
            assert move_ti(
                session,
                claimed.ti_id,
                TI.RUNNING,
                expect=[TI.QUEUED],
                attempt_id=claimed.attempt_id,
                now=world.now + dt.timedelta(seconds=0.5),
            )
        metrics.record_tick(TickResult(), 0.001)
        with transaction(world.factory) as session:  # one callback that was given up
            session.add(
                DueCallback(
                    dedup_key="k",
                    kind="on_failure",
                    dag_id="d",
                    run_id="r",
                    state="failed",
                    status="failed",
                    attempts=5,
                )
            )
        samples = scrape(metrics.port)
    finally:
        metrics.shutdown()

    # Then: the loop's instruments
    assert (result.runs_started, result.tis_queued, result.dead_tis) == (1, 4, 1)
    assert result.tis_requeued == 1
    assert one(samples, "sluice_scheduler_loop_duration_seconds_count") == 2
    assert one(samples, "sluice_scheduler_loop_runs_examined_sum") == 2
    assert one(samples, "sluice_scheduler_loop_tis_queued_sum") == 4
    assert one(samples, "sluice_scheduler_loops_total") == 2
    assert one(samples, "sluice_scheduler_tis_queued_total") == 4
    assert one(samples, "sluice_scheduler_dead_tis_total") == 1
    assert one(samples, "sluice_scheduler_messages_republished_total") == 1
    # the delays: four TIs scheduled and queued in the same tick, one claimed 0.5 s later
    assert one(samples, "sluice_task_instance_schedule_delay_seconds_count") == 4
    assert one(samples, "sluice_task_instance_schedule_delay_seconds_sum") == 0
    assert one(samples, "sluice_task_instance_queued_to_running_seconds_count") == 1
    assert one(samples, "sluice_task_instance_queued_to_running_seconds_sum") == 0.5
    # the gauges, read from the database at the scrape
    assert one(samples, "sluice_task_instances", state="queued", queue="default") == 4
    assert one(samples, "sluice_task_instances", state="running", queue="default") == 1
    assert one(samples, "sluice_task_instances", state="scheduled", queue="default") == 0
    # every unfinished state has its gauge, a sensor's between pokes too
    assert one(samples, "sluice_task_instances", state="up_for_reschedule", queue="default") == 0
    assert one(samples, "sluice_task_instances", state="deferred", queue="default") == 0
    assert one(samples, "sluice_triggers", triggerer="none") == 0  # no trigger waits
    assert one(samples, "sluice_pool_slots_used", pool="default_pool") == 5
    assert one(samples, "sluice_pool_slots_free", pool="default_pool") == 123
    # callbacks by status, every status present
    for status in ("pending", "queued", "running", "delivered"):
        assert one(samples, "sluice_callbacks", status=status) == 0
    assert one(samples, "sluice_callbacks", status="failed") == 1


def test_off_unless_a_port_or_an_exporter_is_configured(world: World) -> None:
    off = SchedulerMetrics(world.settings, world.factory, None, env={})
    assert not off.enabled and off.port is None
    off.record_tick(TickResult(tis_queued=3), 0.1)
    off.observe_queued([], world.now)
    off.shutdown()
    assert not SchedulerMetrics.disabled().enabled

    assert metrics_exporters({}) == set()
    assert metrics_exporters({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}) == {"otlp"}
    assert (
        metrics_exporters(
            {"OTEL_METRICS_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}
        )
        == set()
    )
    assert metrics_exporters({"OTEL_METRICS_EXPORTER": "otlp,prometheus"}) == {"otlp", "prometheus"}
    assert (
        metrics_exporters({"OTEL_SDK_DISABLED": "true", "OTEL_METRICS_EXPORTER": "otlp"}) == set()
    )


def test_a_port_in_use_is_one_clear_error(world: World) -> None:
    from sluice.scheduler.core.settings import ConfigError

    first = SchedulerMetrics(world.settings, world.factory, 0, host="127.0.0.1", env={})
    try:
        assert first.port is not None
        with pytest.raises(ConfigError, match="cannot serve metrics"):
            SchedulerMetrics(world.settings, world.factory, first.port, host="127.0.0.1", env={})
    finally:
        first.shutdown()


def test_otlp_exporter_when_the_standard_variables_name_an_endpoint(world: World) -> None:
    world.dags(WIDE)
    world.trigger("wide", "r1")
    receiver = OtlpReceiver()
    try:
        metrics = SchedulerMetrics(
            world.settings,
            world.factory,
            None,
            env={"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint},
        )
        assert metrics.enabled and metrics.port is None
        metrics.record_tick(TickResult(runs_examined=1), 0.01)
        metrics.shutdown()  # flushes the periodic reader
    finally:
        receiver.close()
    assert receiver.paths == {"/v1/metrics"}
    assert {
        "sluice.scheduler.loop.duration",
        "sluice.scheduler.loop.runs_examined",
        "sluice.task_instances",
        "sluice.pool.slots.free",
    } <= receiver.metric_names
