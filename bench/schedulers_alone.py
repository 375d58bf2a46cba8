"""W7's schedulers-alone half: how fast one and two `sluice scheduler`s take a burst of
many small runs, with no worker.

With workers on the same two cores, workers decide every hop of a chain and the machine
is CPU-bound, so a second scheduler has nothing to add there (W7 with workers, reported
too). This half measures the schedulers' own work on many small runs: start each run,
decide its first task, queue it and publish it, as Airflow's scheduler benchmark
measures its scheduler with the executor short-circuited. Figure: runs per second from
the trigger's commit (the runs exist, the wake-up is sent) to the last run's first task
published (the Celery queue in Redis holds one message per run), on the bench's clock:
the database's stamps are each pass's start, not when its work was done. Each phase has
a database and namespace of its own (no runs left over from the one before), in A-B-B-A
order (full mode) so that drift in the machine's speed cancels out.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import redis
from sqlalchemy import Engine, text

from bench.dagfiles import chain_call, write_dag_file
from bench.live import LiveEnv
from bench.pg import BenchDb
from bench.procs import wait_until
from bench.redisguard import cleanup_redis
from bench.sizes import DAG_W7, Sizes
from sluice.broker.queues import DEFAULT_QUEUE, celery_queue


class AlonePhases:
    """Where each phase's database, DAG file, logs and Redis keys go."""

    def __init__(
        self, admin: Engine, tag: str, workdir: Path, broker_url: str, namespace: str
    ) -> None:
        self.admin, self.tag, self.workdir = admin, tag, workdir
        self.broker_url, self.namespace = broker_url, namespace
        self.extra_env: dict[str, str] = {}
        """More settings for the schedulers (to compare settings)."""

    def phase(self, sizes: Sizes, schedulers: int, label: str) -> dict[str, float]:
        """Start `schedulers` schedulers, trigger the runs, wait for each first task published."""
        db = BenchDb.create(self.admin, self.tag, f"w7{label}")
        where = self.workdir / f"w7-alone-{label}"
        (where / "dags").mkdir(parents=True)
        write_dag_file(where / "dags" / "w7.py", [chain_call(DAG_W7, sizes.w7_length)])
        namespace = f"{self.namespace}-w7{label}"
        env = LiveEnv(db, self.broker_url, namespace, where / "dags", where, 1.0)
        env.extra_env = dict(self.extra_env)
        try:
            env.migrate()
            env.sync_dags([DAG_W7])
            with env.factory() as session, session.begin():  # no worker frees a slot
                session.execute(text("UPDATE pool SET slots = :n"), {"n": sizes.w7_alone_runs})
            for _ in range(schedulers):
                env.start_scheduler()
            client = redis.Redis.from_url(self.broker_url)
            queue = celery_queue(namespace, DEFAULT_QUEUE)
            try:
                runs = env.trigger(DAG_W7, sizes.w7_alone_runs, label)
                started = time.monotonic()
                wait_until(
                    lambda: client.llen(queue) >= len(runs),
                    sizes.run_timeout,
                    f"W7 {label}: a first task of every run published",
                    every=0.002,
                )
                seconds = time.monotonic() - started
            finally:
                client.close()
            return {"runs": float(len(runs)), "seconds": seconds, "runs_per_s": len(runs) / seconds}
        finally:
            env.stop_all()
            db.drop()
            cleanup_redis(self.broker_url, namespace)


def w7_schedulers_alone(phases: AlonePhases, sizes: Sizes) -> dict[str, Any]:
    one = [phases.phase(sizes, 1, "one")]
    two = [phases.phase(sizes, 2, "two")]
    if sizes.repeats > 1:
        two.append(phases.phase(sizes, 2, "twob"))
        one.append(phases.phase(sizes, 1, "oneb"))
    one_rate = sum(p["runs_per_s"] for p in one) / len(one)
    two_rate = sum(p["runs_per_s"] for p in two) / len(two)
    return {
        "figures": {
            "alone_runs": float(sizes.w7_alone_runs),
            "alone_one_scheduler_runs_per_s": one_rate,
            "alone_two_schedulers_runs_per_s": two_rate,
            "alone_ratio": two_rate / one_rate,
        },
        "runs": {
            "alone_one_scheduler_runs_per_s": [p["runs_per_s"] for p in one],
            "alone_two_schedulers_runs_per_s": [p["runs_per_s"] for p in two],
        },
    }
