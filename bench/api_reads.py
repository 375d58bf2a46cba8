"""W9: the web UI's reads of a big DAG, timed in-process through the API app.

One DAG of `w9_tasks` tasks (start >> the rest in parallel >> join, W5's shape: the
widest ready set a topological order can meet) and `w9_runs` runs of it (the grid shows
them all), on a database of its own. The API app (`create_app`) is driven by an
in-process client, so the figures are the server's work (routing, the queries, the task
order, the JSON) with no network: `GET /api/v1/dags/{id}` (the DAG page's task list),
`GET /api/v1/dags/{id}/grid?format=compact&limit=<w9_runs>&rows=200` (the grid as the web
UI asks for it: the rows it shows), the whole compact grid (`grid_whole`, all the rows)
and the same grid in the default format (`grid_cells`, a cell object per TI, as older
clients ask), each in turn: the first request of each
(`cold`: the task order is computed by the first of them) and the median of the next few
(`warm`: the order comes from its cache). As `sluice api` does, the heap is settled
before serving (`settle_heap`), and one request to the DAG list comes first: the
process's own first request (its connections, its first compilations) is not the DAG's.
The sizes of the grid's answers are kept too (`grid_bytes`, `grid_cells_bytes`).
"""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from bench.dagfiles import fanout_call, fanout_tasks, write_dag_file
from bench.metrics import median
from bench.pg import BenchDb, analyze
from bench.procs import BenchError
from bench.profiling import Profiler
from bench.sizes import DAG_W9, Sizes
from sluice.scheduler.api import create_app
from sluice.scheduler.api.app import settle_heap
from sluice.scheduler.api.config import ApiConfig
from sluice.scheduler.core.db import make_engine, make_session_factory, transaction, utcnow
from sluice.scheduler.core.migrate import upgrade
from sluice.scheduler.core.models import Dag
from sluice.scheduler.core.settings import Settings
from sluice.scheduler.core.states import RunType
from sluice.scheduler.scheduling.dagbag import sync_dag_folder
from sluice.scheduler.scheduling.dagrun import create_dagrun

WARM_REQUESTS = 5
UI_ROWS = 200
"""The rows the web UI shows of a grid at first (its `ROWS_STEP`)."""

Result = dict[str, Any]


def timed_get(client: TestClient, path: str) -> tuple[float, int]:
    """The time of one GET, ms, and the size of its body."""
    t0 = time.perf_counter()
    response = client.get(path)
    spent = (time.perf_counter() - t0) * 1000.0
    if response.status_code != 200:
        raise BenchError(f"GET {path}: {response.status_code} {response.text[:200]}")
    return spent, len(response.content)


def w9_api_reads(
    db: BenchDb, workdir: Path, namespace: str, sizes: Sizes, prof: Profiler
) -> Result:
    """Cold and warm times of the DAG detail and the grid of a `w9_tasks`-task DAG, ms."""
    folder = workdir / "w9_dags"
    width = sizes.w9_tasks - 2
    write_dag_file(folder / "bench_api.py", [fanout_call(DAG_W9, width)])
    engine = make_engine(db.url, application_name="sluice-bench-w9")
    try:
        upgrade(engine)
        factory = make_session_factory(engine)
        sync_dag_folder(factory, folder, parse_timeout=120.0, now=utcnow())
        now = utcnow()
        for i in range(sizes.w9_runs):  # a transaction each, as triggers make them
            with transaction(factory) as session:
                dag = session.get(Dag, DAG_W9)
                if dag is None:
                    raise BenchError(f"{DAG_W9} was not parsed")
                logical = now - dt.timedelta(days=i)
                create_dagrun(session, dag, run_type=RunType.MANUAL, logical_date=logical, now=now)
        analyze(engine)  # as autovacuum does after such inserts: plans from real statistics
    finally:
        engine.dispose()
    settings = Settings(database_url=db.url, dags_folder=folder, namespace=namespace)
    figures: dict[str, float] = {
        "tasks": float(fanout_tasks(width)),
        "runs": float(sizes.w9_runs),
    }
    app = create_app(settings, config=ApiConfig())
    settle_heap()  # as `sluice api` does before it serves
    with TestClient(app) as client:
        timed_get(client, "/api/v1/dags")  # the process's own first request (connections)
        grid = f"/api/v1/dags/{DAG_W9}/grid?limit={sizes.w9_runs}"
        for name, path in (
            ("dag_detail", f"/api/v1/dags/{DAG_W9}"),
            ("grid", f"{grid}&format=compact&rows={UI_ROWS}"),
            ("grid_whole", f"{grid}&format=compact"),
            ("grid_cells", grid),
        ):
            figures[f"{name}_cold_ms"], size = timed_get(client, path)
            warm = [timed_get(client, path)[0] for _ in range(WARM_REQUESTS)]
            figures[f"{name}_warm_ms"] = median(warm)
            if name != "dag_detail":
                figures[f"{name}_bytes"] = float(size)
    title = f"API reads of a {sizes.w9_tasks}-task DAG with {sizes.w9_runs} runs (detail, grid)"
    return {"title": title, "figures": figures}
