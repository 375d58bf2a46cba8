"""The floor: a bare Celery app with Sluice's worker settings, measured in the same run.

Same broker (Redis, its own db; or RabbitMQ, a vhost of the bench's), prefork pool with
`-c 4`, late acks, prefetch 1, JSON only, no mingle or gossip; a Redis result backend
carries results for the round trips (the broker's db, or BENCH_RAW_BACKEND beside
RabbitMQ). The worker runs as `celery -A bench.raw_celery worker`; the module attribute
`app` is built on first access from BENCH_RAW_BROKER, BENCH_RAW_QUEUE and
BENCH_RAW_BACKEND.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import redis
from celery import Celery

from bench.metrics import median_run, runs_of, summary_ms
from bench.procs import Proc, clean_env
from bench.redisguard import cleanup_redis

BROKER_ENV = "BENCH_RAW_BROKER"
QUEUE_ENV = "BENCH_RAW_QUEUE"
BACKEND_ENV = "BENCH_RAW_BACKEND"
DEFAULT_BROKER = "redis://127.0.0.1:6379/15"


def create_raw_app(broker_url: str, queue: str, backend_url: str | None = None) -> Celery:
    """A Celery app with the worker settings of `broker.app.create_app`, plus results (in
    `backend_url`, a Redis; by default the broker's)."""
    backend = backend_url or broker_url
    app = Celery("bench_raw", broker=broker_url, backend=backend, set_as_current=False)
    app.conf.update(
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        broker_connection_retry_on_startup=True,
        broker_transport_options={"visibility_timeout": 3600},
        task_default_queue=queue,
        task_create_missing_queues=True,
        task_send_sent_event=False,
        worker_send_task_events=False,
        result_expires=600,
        enable_utc=True,
        timezone="UTC",
    )

    @app.task(name="bench.noop", shared=False)
    def noop() -> None:
        return None

    @app.task(name="bench.stamp", shared=False)
    def stamp() -> list[float]:
        """A no-op that reports when it started and ended (wall clock)."""
        started = time.time()
        return [started, time.time()]

    return app


_lazy_app: Celery | None = None


def __getattr__(name: str) -> Any:
    """`bench.raw_celery.app` for `celery -A`, built on first access (PEP 562)."""
    global _lazy_app
    if name == "app":
        if _lazy_app is None:
            _lazy_app = create_raw_app(
                os.environ.get(BROKER_ENV, DEFAULT_BROKER),
                os.environ.get(QUEUE_ENV, "bench.raw"),
                os.environ.get(BACKEND_ENV) or None,
            )
        return _lazy_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def start_raw_worker(
    broker_url: str,
    queue: str,
    log_dir: Path,
    concurrency: int = 4,
    backend_url: str | None = None,
) -> Proc:
    argv = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "bench.raw_celery",
        "worker",
        "-Q",
        queue,
        "-c",
        str(concurrency),
        "-P",
        "prefork",
        "-l",
        "INFO",
        "-n",
        f"benchraw@%h-{os.getpid()}",
        "--without-mingle",
        "--without-gossip",
    ]
    env = clean_env({BROKER_ENV: broker_url, QUEUE_ENV: queue, BACKEND_ENV: backend_url or ""})
    proc = Proc("raw-celery-worker", argv, env, log_dir / "raw-celery-worker.log")
    proc.wait_for_log(" ready.", timeout=60)
    return proc


def measure_floor(
    app: Celery, queue: str, drain_n: int, rtt_n: int, repeats: int = 1
) -> dict[str, Any]:
    """Drain rate of `drain_n` no-op tasks (the median of `repeats` drains; every drain's
    figures in `drains`) and `rtt_n` sequential round trips (none when 0)."""
    noop = app.tasks["bench.noop"]
    ids: list[str] = []
    for _ in range(8):  # warm every pool child and the connections
        result = noop.apply_async(queue=queue)
        result.get(timeout=30)
        ids.append(result.id)

    drains = [_drain(app, queue, drain_n, ids) for _ in range(repeats)]
    drain = median_run(drains, "drain_tasks_per_s")
    if not rtt_n:
        _forget(app, ids)
        return {**drain, "drains": drains}

    rtt = _round_trips(app, queue, rtt_n, ids)
    _forget(app, ids)
    return {
        **drain,
        "drains": drains,
        "drain_runs": runs_of(drains, "drain_tasks_per_s"),
        "rtt_median_ms": rtt["median_ms"],
        "rtt_p95_ms": rtt["p95_ms"],
        "rtt_min_ms": rtt["min_ms"],
        "rtt_n": rtt_n,
    }


def _drain(app: Celery, queue: str, drain_n: int, ids: list[str]) -> dict[str, float]:
    """Send `drain_n` stamping no-ops at once; first start → last end, by the tasks' clocks."""
    stamp = app.tasks["bench.stamp"]
    sent_at = time.time()
    with app.producer_or_acquire() as producer:
        pending = [stamp.apply_async(queue=queue, producer=producer) for _ in range(drain_n)]
    stamps = [r.get(timeout=120) for r in pending]
    collected_at = time.time()
    ids += [r.id for r in pending]
    drain_s = max(s[1] for s in stamps) - min(s[0] for s in stamps)
    return {
        "drain_tasks": float(drain_n),
        "drain_seconds": drain_s,
        "drain_tasks_per_s": drain_n / drain_s if drain_s > 0 else float("nan"),
        "drain_wall_tasks_per_s": drain_n / (collected_at - sent_at),
    }


def _round_trips(app: Celery, queue: str, rtt_n: int, ids: list[str]) -> dict[str, float]:
    """`rtt_n` no-ops sent one after another, each awaited: the round trip's summary (ms)."""
    noop = app.tasks["bench.noop"]
    rtts: list[float] = []
    for _ in range(rtt_n):
        t0 = time.perf_counter()
        result = noop.apply_async(queue=queue)
        result.get(timeout=30)
        rtts.append((time.perf_counter() - t0) * 1000.0)
        ids.append(result.id)
    return summary_ms(rtts)


def _forget(app: Celery, task_ids: list[str]) -> None:
    """Delete the results this run stored (they would expire anyway)."""
    client = redis.Redis.from_url(str(app.conf.result_backend))
    try:
        for i in range(0, len(task_ids), 500):
            client.delete(*[f"celery-task-meta-{t}" for t in task_ids[i : i + 500]])
    finally:
        client.close()


class PairedFloor:
    """The floor's worker kept running beside the Sluice workloads, so that each W1 or W3
    run can be paired with a drain made just before it, and each W2 chain with round trips
    made just before it: on a VM whose speed drifts by tens of percent within minutes, the
    ratio of two figures from the same minute says more than the ratio of medians taken
    minutes apart."""

    def __init__(
        self,
        broker_url: str,
        queue: str,
        log_dir: Path,
        drain_n: int,
        backend_url: str | None = None,
    ) -> None:
        self.broker_url, self.queue, self.drain_n = broker_url, queue, drain_n
        self.worker = start_raw_worker(broker_url, queue, log_dir, backend_url=backend_url)
        self.app = create_raw_app(broker_url, queue, backend_url)
        self.ids: list[str] = []
        noop = self.app.tasks["bench.noop"]
        for _ in range(8):  # warm every pool child and the connections
            result = noop.apply_async(queue=queue)
            result.get(timeout=30)
            self.ids.append(result.id)

    def drain(self) -> float:
        """One drain of the floor now: tasks/s."""
        return _drain(self.app, self.queue, self.drain_n, self.ids)["drain_tasks_per_s"]

    def round_trips(self, rtt_n: int) -> dict[str, float]:
        """`rtt_n` round trips of the floor now, one after another: their summary (ms)."""
        return _round_trips(self.app, self.queue, rtt_n, self.ids)

    def close(self) -> None:
        try:
            self.worker.stop()
            _forget(self.app, self.ids)
        finally:
            self.app.close()
            cleanup_redis(self.broker_url, self.queue)  # nothing to do on RabbitMQ
