"""How big each workload is: the full sizes, and tiny ones for `--quick`."""

from __future__ import annotations

from dataclasses import dataclass

DELAYS_MS = (0, 2, 10)
"""Milliseconds the latency workloads add to each round trip between the workers and
PostgreSQL (0: the proxy's own cost)."""


def latency_name(workload: str, ms: int) -> str:
    """`W1+2ms`: `workload` with `ms` more a round trip between the workers and PostgreSQL."""
    return f"{workload}+{ms}ms"


LATENCY = tuple(latency_name(w, ms) for w in ("W1", "W2") for ms in DELAYS_MS)
"""The latency workloads (`bench.latency`), W1's then W2's."""


WORKLOADS = (
    "W1",
    "W2",
    "W3",
    "W3API",
    "W3B",
    "W3CLI",
    "W4",
    "W5",
    "W6",
    "W7",
    "W8",
    "W9",
    "W10",
    "W11",
    "W12",
    "W13",
    "W1R",
    "W2R",
    "W3R",
    *LATENCY,
)
"""W3API, W3B and W3CLI: W3's runs triggered as users trigger them (the REST API of a
`sluice api` process, `sluice dags trigger` processes). W1R, W2R, W3R: W1-W3 with
RabbitMQ as the broker, beside raw Celery on RabbitMQ. W12: the same figures on an
young database and on one with years of history. W13: mapped TIs deferred on `Sleep`,
resumed by one `sluice triggerer`. W1+<ms>ms, W2+<ms>ms: W1 and W2 with the workers'
PostgreSQL behind a proxy adding <ms> to each round trip (`bench.latency`)."""


DAG_W1 = "bench_w1_fanout"
DAG_W2 = "bench_w2_chain"
DAG_W3 = "bench_w3_diamond"
DAG_W5 = "bench_w5_big"
DAG_W7 = "bench_w7_chain"
DAG_W9 = "bench_w9_api"
DAG_W10 = "bench_w10_mark"
DAG_W11 = "bench_w11_mapped"
DAG_W11_EXPAND = "bench_w11_expand"
DAG_W13 = "bench_w13_deferred"
DAG_WARMUP = "bench_warmup"


@dataclass(frozen=True)
class Sizes:
    mode: str
    floor_drain: int = 200
    floor_rtt: int = 50
    w1_width: int = 200
    w2_length: int = 50
    w3_runs: int = 20
    w3_width: int = 8
    w3b_runs: int = 100
    """Runs of W3's DAG posted to the REST API by W3B (W3API posts `w3_runs`)."""
    api_threads: int = 20
    """Threads posting W3API's and W3B's triggers at once (each its own connection)."""
    w4_dags: tuple[int, ...] = (10, 100, 1000)
    w4_ticks: int = 30
    w5_tasks: int = 10_000
    w5_end_to_end: bool = True
    w5_timeout: float = 240.0
    w6_settle: float = 11.0
    """Seconds to wait for PostgreSQL to publish backends' pending stats (idle flush ≤ 10 s)."""
    w7_runs: int = 40
    w7_length: int = 5
    w7_alone_runs: int = 250
    """Runs triggered at once for the schedulers alone (the DAG's max_active_runs: 256)."""
    w8_w1_width: int = 200
    w8_w2_length: int = 50
    w9_tasks: int = 10_000
    w9_runs: int = 25
    """Runs of W9's DAG the grid shows (a 10,000-task DAG with 25 runs)."""
    """Tasks of the DAG whose API reads W9 times (the DAG page of a big DAG)."""
    w12_dags: int = 100
    w12_runs_per_dag: int = 500
    """W12's history: finished runs of each of its `w12_dags` 20-task DAGs (1,000,000 TIs)."""
    w12_grid_runs: int = 100
    """Finished runs of W12's 50-task DAG, all in its grid (100 runs × 50 tasks)."""
    w10_marks: int = 5
    """Runs whose middle task is marked success with `sluice tasks mark` (W10)."""
    w11_indexes: int = 1000
    """Items of the upstream the mapped no-op of W11's live run expands over (its indexes)."""
    w11_expand_items: int = 10_000
    """Items of the upstream whose expansion W11 times in-process (one `update_state`)."""
    w11_expansions: int = 5
    """Expansions timed in-process, each of a fresh run; W11 reports their median."""
    w13_tis: int = 1000
    """Mapped TIs of W13's run, each deferred on `Sleep(w13_sleep_seconds)` on its first try."""
    w13_sleep_seconds: float = 5.0
    """What each of W13's TIs sleeps on the triggerer before it resumes."""
    run_timeout: float = 180.0
    repeats: int = 3
    """Runs of the floor's drain, W1, W2, W3 (W3API, W3B, W3CLI) and W11; each reports its
    median run (this VM's speed drifts by tens of percent within minutes)."""


FULL = Sizes(mode="full")

QUICK = Sizes(
    mode="quick",
    floor_drain=20,
    floor_rtt=10,
    w1_width=10,
    w2_length=5,
    w3_runs=2,
    w3b_runs=5,
    api_threads=3,
    w4_dags=(10, 20),
    w4_ticks=5,
    w5_tasks=100,
    w5_end_to_end=False,
    w6_settle=1.5,
    w7_runs=4,
    w7_length=3,
    w7_alone_runs=6,
    w8_w1_width=10,
    w8_w2_length=5,
    w9_tasks=100,
    w9_runs=2,
    w12_dags=10,
    w12_runs_per_dag=20,
    w12_grid_runs=10,
    w10_marks=1,
    w11_indexes=10,
    w11_expand_items=100,
    w11_expansions=3,
    w13_tis=20,
    w13_sleep_seconds=1.0,
    run_timeout=60.0,
    repeats=1,
)
