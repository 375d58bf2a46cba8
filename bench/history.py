"""W12: years of history. The same figures on a young database (`YOUNG_RUNS` finished
runs of each DAG: what the DAG list shows of each) and on one that holds `w12_dags` ×
`w12_runs_per_dag` finished runs of 20 tasks (1,000,000 task instances in full mode)
with their logs, loaded as Sluice writes them.

Each phase is a database of its own with the same DAG files: the `w12_dags` history
DAGs (a 20-task fan-out each, never scheduled), a 50-task DAG with `w12_grid_runs`
finished runs (the grid's), and W1, W2 and W3's DAGs. Each phase then bulk-loads the
history DAGs' runs, `YOUNG_RUNS` or `w12_runs_per_dag` each (`load_runs`: `INSERT …
SELECT` from `generate_series`, every column as a finished run, task instance and try's
log hold them: states, tries, attempt ids, hosts, pids, times, span carriers, results,
one failed run in 97 with its failed and upstream_failed tasks) and runs VACUUM (ANALYZE),
as autovacuum would after such growth.
Then, in rounds that alternate young and history (`repeats` of each, A-B-A-B: the VM's
speed drifts by tens of percent within a minute, and one measurement of each phase
read as a 2x slowdown or a 1.5x speed-up for the same code), each phase's scheduler's
tick in-process (median of `w4_ticks`), the API's DAG list, grid (`w12_grid_runs` runs
× 50 tasks) and run list in-process (median of five warm requests), and W1, W2 and W3
with a live scheduler and worker. Each figure is the median of its rounds, and its ratio
history / young the result (target ≤ 1.2×), with the rows that sequential scans of
`task_instance`, `dag_run` and `task_log` read during the history rounds: a query whose
plan scans a whole table would read about a million each time.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import Engine, text

from bench import workloads
from bench.api_reads import timed_get
from bench.dagfiles import chain_call, fanout_call, write_dag_file
from bench.inproc import scheduler_job, timed_tick
from bench.live import LiveEnv
from bench.metrics import median
from bench.pg import BenchDb, analyze
from bench.profiling import Profiler
from bench.sizes import DAG_W1, DAG_W2, DAG_W3, DAG_WARMUP, Sizes
from sluice.scheduler.api import create_app
from sluice.scheduler.api.app import settle_heap
from sluice.scheduler.api.config import ApiConfig
from sluice.scheduler.core.db import make_engine, utcnow
from sluice.scheduler.core.settings import Settings

Result = dict[str, Any]

HISTORY_PREFIX = "bench_hist_"
DAG_GRID = "bench_w12_grid"
HISTORY_WIDTH = 18
"""A history DAG's parallel tasks: with start and join, 20 tasks a run."""
GRID_WIDTH = 48
"""The grid DAG's parallel tasks: 50 tasks a run."""
WARM_REQUESTS = 5
YOUNG_RUNS = 10
"""Finished runs of each history DAG in the young database (the DAG list's recent runs)."""
WARM_TICKS = 3
TABLES = ("task_instance", "dag_run", "task_log")

_RUNS_SQL = """
INSERT INTO dag_run (dag_id, run_id, logical_date, run_type, state, conf, dag_hash,
    queued_at, start_date, end_date, last_scheduling_decision, started_by_job_id,
    context_carrier, span_status, callback_mask)
SELECT d.dag_id,
    'scheduled__' || to_char(t.ld AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS') || '+00:00',
    t.ld, 'scheduled', CASE WHEN n % 97 = 0 THEN 'failed' ELSE 'success' END, '{}',
    d.version_hash, t.ld, t.ld + interval '1 second', t.ld + interval '61 seconds',
    t.ld + interval '61 seconds', 1,
    json_build_object('traceparent', '00-' || md5(d.dag_id || n) || '-'
        || substr(md5(n::text || d.dag_id), 1, 16) || '-01'),
    'not_started', 0
FROM dag d
CROSS JOIN generate_series(1, :runs) AS n
CROSS JOIN LATERAL (SELECT CAST(:origin AS timestamptz) + n * interval '1 hour' AS ld) t
WHERE d.dag_id LIKE :pattern
"""

_TIS_SQL = """
INSERT INTO task_instance (dag_run_id, dag_id, run_id, task_id, state, try_number,
    max_tries, attempt_id, queue, pool, pool_slots, priority_weight, hostname, pid,
    scheduled_at, queued_at, start_date, end_date, last_heartbeat_at, queued_by_job_id,
    context_carrier, span_status, result, error, callback_mask, map_index)
SELECT r.id, r.dag_id, r.run_id, k.task_id, s.state,
    CASE WHEN s.state = 'upstream_failed' THEN 0 ELSE 1 END, 1,
    CASE WHEN s.state = 'upstream_failed' THEN NULL ELSE gen_random_uuid()::text END,
    'default', 'default_pool', 1, 1,
    CASE WHEN s.state = 'upstream_failed' THEN NULL ELSE 'worker-' || (r.id % 8) END,
    CASE WHEN s.state = 'upstream_failed' THEN NULL ELSE 1000 + (r.id % 4000)::int END,
    r.start_date, r.start_date, r.start_date + interval '1 second',
    r.start_date + interval '2 seconds', r.start_date + interval '1 second', 1,
    json_build_object('traceparent', '00-' || md5(r.run_id || k.task_id) || '-'
        || substr(md5(k.task_id || r.id), 1, 16) || '-01'),
    'not_started',
    CASE WHEN s.state = 'success' THEN 'null' END,
    CASE WHEN s.state = 'failed' THEN 'ValueError: bad row 17 in part-00003.csv' END,
    0, -1
FROM dag_run r
JOIN dag d ON d.dag_id = r.dag_id
CROSS JOIN LATERAL json_object_keys(d.serialized -> 'tasks') AS k(task_id)
CROSS JOIN LATERAL (SELECT CASE
    WHEN r.state = 'failed' AND k.task_id = 't00000' THEN 'failed'
    WHEN r.state = 'failed' AND k.task_id = 'join' THEN 'upstream_failed'
    ELSE 'success' END AS state) s
WHERE r.dag_id LIKE :pattern
"""

_LOGS_SQL = """
INSERT INTO task_log (ti_id, try_number, attempt_id, hostname, content, dropped_lines,
    started_at, updated_at, finished_at)
SELECT ti.id, ti.try_number, ti.attempt_id, ti.hostname,
    'reading part-00003.csv' || chr(10) || 'wrote 1280 rows to raw.events' || chr(10), 0,
    ti.start_date, ti.end_date, ti.end_date
FROM task_instance ti
WHERE ti.dag_id LIKE :pattern AND ti.try_number > 0
"""


def load_runs(engine: Engine, pattern: str, runs_per_dag: int, origin: dt.datetime) -> int:
    """`runs_per_dag` finished runs, one an hour from `origin`, of every DAG whose id is
    LIKE `pattern`, with their task instances and logs; one transaction. The TIs made."""
    with engine.begin() as conn:
        conn.execute(text(_RUNS_SQL), {"runs": runs_per_dag, "origin": origin, "pattern": pattern})
        made = conn.execute(text(_TIS_SQL), {"pattern": pattern}).rowcount
        conn.execute(text(_LOGS_SQL), {"pattern": pattern})
    return int(made)


def seq_reads(engine: Engine) -> dict[str, int]:
    """Rows read by sequential scans of `TABLES` so far (pg_stat_user_tables; the
    statistics collector's figures lag by up to its flush interval)."""
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT relname, coalesce(seq_tup_read, 0) FROM pg_stat_user_tables "
                "WHERE relname = ANY(:tables)"
            ),
            {"tables": list(TABLES)},
        ).all()
    return {str(name): int(read) for name, read in rows}


def write_dags(folder: Path, sizes: Sizes) -> list[str]:
    """The phase's DAG files; the DAG ids a sync must find."""
    history = [f"{HISTORY_PREFIX}{i:03d}" for i in range(sizes.w12_dags)]
    calls = [fanout_call(dag_id, HISTORY_WIDTH) for dag_id in history]
    write_dag_file(folder / "bench_history.py", calls)
    write_dag_file(
        folder / "bench_w12.py",
        [
            fanout_call(DAG_GRID, GRID_WIDTH),
            fanout_call(DAG_WARMUP, 8),
            fanout_call(DAG_W1, sizes.w1_width),
            chain_call(DAG_W2, sizes.w2_length),
            fanout_call(DAG_W3, sizes.w3_width),
        ],
    )
    return [*history, DAG_GRID, DAG_WARMUP, DAG_W1, DAG_W2, DAG_W3]


def api_reads(db: BenchDb, folder: Path, namespace: str, sizes: Sizes) -> dict[str, float]:
    """Warm medians of the DAG list, the grid DAG's grid and its run list, ms."""
    settings = Settings(database_url=db.url, dags_folder=folder, namespace=namespace)
    app = create_app(settings, config=ApiConfig())
    settle_heap()
    figures: dict[str, float] = {}
    with TestClient(app) as client:
        for name, path in (
            ("dag_list_ms", "/api/v1/dags"),
            ("grid_ms", f"/api/v1/dags/{DAG_GRID}/grid?limit={sizes.w12_grid_runs}"),
            ("run_list_ms", f"/api/v1/dags/{DAG_GRID}/runs"),
        ):
            timed_get(client, path)  # its first request: the DAG's order, compilations
            figures[name] = median([timed_get(client, path)[0] for _ in range(WARM_REQUESTS)])
    return figures


def tick_ms(db: BenchDb, folder: Path, namespace: str, sizes: Sizes) -> float:
    """The scheduler's tick in-process, every periodic step due (`inproc.timed_tick`; no
    run to start or examine), median ms."""
    with scheduler_job(db, folder, namespace, []) as (job, _factory):
        job.refresh_dags(utcnow(), force=True)
        times = [timed_tick(job) for _ in range(WARM_TICKS + sizes.w4_ticks)]
    return median(times[WARM_TICKS:])


def live_figures(env: LiveEnv, sizes: Sizes, prof: Profiler) -> dict[str, float]:
    """W1, W2 and W3 on a live scheduler and worker: their main figures."""
    w1 = workloads.w1_and_w6(env, sizes, prof, with_commits=False)["W1"]["figures"]
    w2 = workloads.w2_chain(env, sizes, prof)["figures"]
    w3 = workloads.w3_many_runs(env, sizes, prof)["figures"]
    return {
        "w1_tasks_per_s": w1["tasks_per_s"],
        "w2_hop_median_ms": w2["hop_median_ms"],
        "w3_tasks_per_s": w3["tasks_per_s"],
    }


@dataclass(frozen=True)
class Place:
    """Where one phase lives: its database, DAGs folder, logs folder, broker and namespace."""

    db: BenchDb
    folder: Path
    logs: Path
    broker_url: str
    namespace: str

    def env(self) -> LiveEnv:
        return LiveEnv(self.db, self.broker_url, self.namespace, self.folder, self.logs, 1.0)


def prepare(place: Place, sizes: Sizes, history: bool) -> dict[str, float]:
    """One phase's database: migrated, its DAGs synced, its runs loaded (`YOUNG_RUNS` or
    `w12_runs_per_dag` of each history DAG), analyzed; the load's figures."""
    expect = write_dags(place.folder, sizes)
    env = place.env()
    engine = make_engine(place.db.url, application_name="sluice-bench-w12")
    try:
        env.migrate()
        env.sync_dags(expect)
        origin = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
        t0 = time.monotonic()
        load_runs(engine, DAG_GRID, sizes.w12_grid_runs, origin)
        runs = sizes.w12_runs_per_dag if history else YOUNG_RUNS
        tis = float(load_runs(engine, HISTORY_PREFIX + "%", runs, origin))
        loaded = {"tis_loaded": tis, "load_seconds": time.monotonic() - t0}
        analyze(engine)
    finally:
        env.stop_all()
        engine.dispose()
    return loaded


def measure(place: Place, sizes: Sizes, prof: Profiler) -> dict[str, float]:
    """One round of a prepared phase's figures: the tick and the API's reads in-process,
    W1-W3 on a live scheduler and worker started for it, and the rows sequential scans
    of the big tables read meanwhile."""
    env = place.env()
    engine = make_engine(place.db.url, application_name="sluice-bench-w12")
    figures: dict[str, float] = {}
    try:
        scans_before = seq_reads(engine)
        figures["tick_ms"] = tick_ms(place.db, place.folder, place.namespace, sizes)
        figures.update(api_reads(place.db, place.folder, place.namespace, sizes))
        env.start_worker(4)
        env.start_scheduler()
        workloads.warm_up(env, sizes)
        figures.update(live_figures(env, sizes, prof))
        env.stop_all()
        time.sleep(1.0)  # the statistics collector's flush (stats_fetch_consistency)
        scans_after = seq_reads(engine)
        for table in TABLES:
            read = scans_after.get(table, 0) - scans_before.get(table, 0)
            figures[f"seq_rows_read_{table}"] = float(read)
    finally:
        env.stop_all()
        engine.dispose()
    return figures


def rounds_merged(loaded: dict[str, float], rounds: list[dict[str, float]]) -> dict[str, float]:
    """A phase's figures from its rounds: each figure's median, the scans' rows summed."""
    merged = dict(loaded)
    for name in rounds[0]:
        values = [r[name] for r in rounds]
        merged[name] = sum(values) if name.startswith("seq_rows_read_") else median(values)
    return merged


COMPARED = (
    "tick_ms",
    "dag_list_ms",
    "grid_ms",
    "run_list_ms",
    "w1_tasks_per_s",
    "w2_hop_median_ms",
    "w3_tasks_per_s",
)
HIGHER_IS_BETTER = {"w1_tasks_per_s", "w3_tasks_per_s"}


def compare(empty: dict[str, float], history: dict[str, float]) -> dict[str, float]:
    """Each figure of both phases (`_empty`: the young database's) and how much worse
    history makes it (≥ 1: worse)."""
    out: dict[str, float] = {}
    for name in COMPARED:
        a, b = empty[name], history[name]
        out[f"{name}_empty"], out[f"{name}_history"] = a, b
        out[f"{name}_slowdown"] = (a / b) if name in HIGHER_IS_BETTER else (b / a)
    for key in ("tis_loaded", "load_seconds"):
        out[key] = history[key]
    out["young_tis_loaded"] = empty["tis_loaded"]
    for table in TABLES:
        out[f"seq_rows_read_{table}"] = history[f"seq_rows_read_{table}"]
    return out
