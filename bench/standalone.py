"""W8: `sluice standalone --trigger` (SQLite, embedded broker) on the W1 and W2 shapes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import select

from bench.dagfiles import chain_call, fanout_call, write_dag_file
from bench.metrics import chain_hops, read_tis, summary_ms, throughput
from bench.procs import BenchError, clean_env, run_cli, sluice_argv
from bench.sizes import DAG_W1, DAG_W2, Sizes
from sluice.scheduler.core.db import make_engine, make_session_factory
from sluice.scheduler.core.models import DagRun

Result = dict[str, Any]


def w8_standalone(workdir: Path, namespace: str, loop_interval: float, sizes: Sizes) -> Result:
    folder = workdir / "w8_dags"
    write_dag_file(
        folder / "bench_dags.py",
        [fanout_call(DAG_W1, sizes.w1_width), chain_call(DAG_W2, sizes.w2_length)],
    )
    db_path = workdir / "w8" / "sluice.db"
    db_path.parent.mkdir(parents=True, exist_ok=True)
    url = f"sqlite:///{db_path}"
    env = clean_env(
        {
            "SLUICE_DATABASE_URL": url,
            "SLUICE_DAGS_FOLDER": str(folder),
            "SLUICE_NAMESPACE": namespace,
            "SLUICE_LOOP_INTERVAL": f"{loop_interval:g}",
            "SLUICE_DAG_REFRESH_INTERVAL": "0.5",
        }
    )
    for dag_id in (DAG_W1, DAG_W2):
        run_cli([*sluice_argv(), "standalone", "--trigger", dag_id], env, sizes.run_timeout)
    engine = make_engine(url)
    try:
        factory = make_session_factory(engine)
        with factory() as session:
            pks = {
                dag_id: list(session.scalars(select(DagRun.id).where(DagRun.dag_id == dag_id)))
                for dag_id in (DAG_W1, DAG_W2)
            }
        if not all(pks.values()):
            raise BenchError(f"standalone left no runs: {pks}")
        w1 = throughput(read_tis(factory, pks[DAG_W1]))
        hops = summary_ms(chain_hops(read_tis(factory, pks[DAG_W2]))["hop"])
    finally:
        engine.dispose()
    return {
        "title": "sluice standalone (SQLite, embedded broker) on the W1 and W2 shapes",
        "figures": {
            "w1_tasks_per_s": w1["tasks_per_s"],
            "w2_hop_median_ms": hops["median_ms"],
            "w2_hop_p95_ms": hops["p95_ms"],
        },
    }
