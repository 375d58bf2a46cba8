"""Years of history cost nothing per task: with 100,000 finished task instances in the
database (loaded as Sluice writes them, then VACUUM (ANALYZE)), what a deployment does every day
(a fan-out and its join through a small pool, a mapped task and its reduce, a retry,
the CLI's and the API's pages) reads no big table whole. (`sluice status` counts every
TI by state, finished ones too: it is left out.)

Every statement runs more than five times, so PostgreSQL weighs the generic plan of
each prepared statement against its custom plans, as in a long-running deployment (a
generic plan that answers an EXISTS from a sequential scan looks cheap, and reads every
finished TI when none matches). A plan that reads a table whole shows in
`pg_stat_user_tables.seq_tup_read`: about 100,000 rows of `task_instance` each time."""

from __future__ import annotations

import datetime as dt
import signal
import textwrap

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.pool import NullPool

from bench.dagfiles import fanout_call, write_dag_file
from bench.history import HISTORY_PREFIX, HISTORY_WIDTH, TABLES, load_runs, seq_reads
from bench.pg import analyze
from sluice.scheduler.api import create_app
from sluice.scheduler.api.config import ApiConfig
from sluice.scheduler.core.settings import Settings
from tests.procs import Sluice, wait_until


def jobs(engine: Engine, state: str) -> int:
    """How many scheduler jobs are in `state`."""
    with engine.connect() as conn:
        query = text("SELECT count(*) FROM job WHERE job_type = 'scheduler' AND state = :s")
        return int(conn.execute(query, {"s": state}).scalar_one())


HISTORY_DAGS = 20
RUNS_PER_DAG = 250  # 20 × 250 runs × 20 tasks: 100,000 TIs

DAILY = """
from datetime import timedelta
from sluice import DAG, task

with DAG("daily", schedule=None, max_active_runs=8) as dag:
    @task
    def start():
        return 1

    @task
    def part(i):
        return i

    @task(retries=1, retry_delay=timedelta(milliseconds=50))
    def flaky(context):
        if context["try_number"] == 1:
            raise ValueError("first try fails")

    @task
    def total(parts):
        return sum(parts)

    parts = part.expand(i=list(range(12)))
    start >> parts
    total(parts) >> flaky
"""


@pytest.mark.long
def test_history_makes_no_statement_read_a_table_whole(sluice: Sluice) -> None:
    # Given 100,000 finished TIs with their runs and logs, statistics up to date
    write_dag_file(
        sluice.dags_folder / "history.py",
        [fanout_call(f"{HISTORY_PREFIX}{i:03d}", HISTORY_WIDTH) for i in range(HISTORY_DAGS)],
    )
    write_dag_file(sluice.dags_folder / "wide.py", [fanout_call("wide", 30)])
    (sluice.dags_folder / "daily.py").write_text(textwrap.dedent(DAILY))
    sluice.run("dags", "list")
    sluice.ok("pools", "set", "default_pool", "4")  # TIs wait: the backlog and fill paths
    engine = create_engine(sluice.database_url, poolclass=NullPool)
    origin = dt.datetime(2021, 1, 1, tzinfo=dt.UTC)
    assert load_runs(engine, HISTORY_PREFIX + "%", RUNS_PER_DAG, origin) == 100_000
    analyze(engine)
    with engine.connect() as conn:
        sizes = {t: conn.execute(text(f"SELECT count(*) FROM {t}")).scalar_one() for t in TABLES}
    before = seq_reads(engine)

    # When a scheduler dies (the next one finds its job dead and takes over its spans),
    # runs go through a scheduler and a worker, and a user reads the API's pages
    doomed = sluice.scheduler()
    wait_until(lambda: jobs(engine, "running"), timeout=30)
    sluice.stop(doomed, signal.SIGKILL)  # its job row stays `running`
    sluice.scheduler()
    sluice.worker(concurrency=4)
    runs = [sluice.trigger("wide") for _ in range(3)] + [sluice.trigger("daily") for _ in range(2)]
    for run_id in runs[:3]:
        assert sluice.wait_run("wide", run_id) == "success"
    for run_id in runs[3:]:
        assert sluice.wait_run("daily", run_id) == "success"
    for args in (
        ("dags", "list"),
        ("dags", "runs", "daily", "--limit", "1"),
        ("tasks", "states", "daily", runs[3]),
    ):
        sluice.ok(*args)
    settings = Settings(database_url=sluice.database_url, dags_folder=sluice.dags_folder)
    with TestClient(create_app(settings, config=ApiConfig())) as client:
        for path in (
            "/api/v1/dags",
            f"/api/v1/dags/{HISTORY_PREFIX}007",
            f"/api/v1/dags/{HISTORY_PREFIX}007/grid?limit=100",
            f"/api/v1/dags/{HISTORY_PREFIX}007/runs",
            f"/api/v1/dags/daily/runs/{runs[3]}/tasks",
        ):
            for _ in range(7):  # past the first executions: generic plans
                assert client.get(path).status_code == 200, path
    wait_until(lambda: jobs(engine, "failed"), timeout=30)  # the dead one found
    sluice.stop_all()  # a backend flushes its statistics as it exits

    # Then no statement read task_instance, dag_run or task_log whole: all sequential
    # scans together read less than one table's rows
    after = seq_reads(engine)
    engine.dispose()
    read = {table: after.get(table, 0) - before.get(table, 0) for table in TABLES}
    assert all(read[table] < sizes[table] for table in TABLES), (read, sizes)
