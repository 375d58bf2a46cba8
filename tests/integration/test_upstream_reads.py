"""What the indexes of a wide map read of their upstream, on a real scheduler and worker:
the upstream's list once per worker process (its copy after), and each index of a
mapped chain one row of the index before it."""

from __future__ import annotations

import json
import textwrap

from sqlalchemy import create_engine
from sqlalchemy.pool import NullPool

from sluice.broker.worker.upstream_results import UPSTREAM_RESULTS, read_params
from sluice.scheduler.core.db import executed
from tests.integration.test_cancel_run import logs, rows
from tests.procs import Sluice

ITEMS = 120

DAG = f"""
from sluice import DAG, task

with DAG("wide", schedule=None, max_active_tasks=16) as dag:
    @task
    def items():
        return [f"item-{{i:04d}}" for i in range({ITEMS})]

    @task
    def echo(x):
        return x

    @task
    def size(y):
        return len(y) + 1000

    size.expand(y=echo.expand(x=items()))
"""


def test_a_wide_map_reads_its_upstream_list_once_per_worker_process(sluice: Sluice) -> None:
    (sluice.dags_folder / "wide.py").write_text(textwrap.dedent(DAG))
    sluice.run("dags", "list")
    sluice.scheduler()
    sluice.start("worker", "worker", "-Q", "default", "-c", "1", "--loglevel", "DEBUG")
    run_id = sluice.trigger("wide")
    assert sluice.wait_run("wide", run_id) == "success"

    found = rows(
        sluice.database_url,
        "SELECT task_id, map_index, result FROM task_instance "
        f"WHERE run_id = '{run_id}' AND map_index >= 0 ORDER BY task_id, map_index",
    )
    expected = [f"item-{i:04d}" for i in range(ITEMS)]
    echoed = [json.loads(str(r[2])) for r in found if r[0] == "echo"]
    sized = [json.loads(str(r[2])) for r in found if r[0] == "size"]
    assert echoed == expected  # each index its own item, from the copy or not
    assert sized == [len(item) + 1000 for item in expected]  # one to one, index by index
    # one pool process: the first index of `echo` read the list, every other one its copy
    assert logs(sluice).count("result of 'items' (attempt") == ITEMS - 1
    # the one-to-one upstream (small results) is never copied, read row by row
    assert "result of 'echo'" not in logs(sluice)

    engine = create_engine(sluice.database_url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            run_pk = conn.exec_driver_sql(
                f"SELECT id FROM dag_run WHERE run_id = '{run_id}'"
            ).scalar_one()
            params = read_params({}, ["echo"], "echo", run_pk=run_pk, map_index=7)
            read = executed(conn, (UPSTREAM_RESULTS, params))
            attempt = conn.exec_driver_sql(
                f"SELECT attempt_id FROM task_instance WHERE dag_run_id = {run_pk} "
                "AND task_id = 'items'"
            ).scalar_one()

            def items_result(known: dict[str, str]) -> str | None:
                params = read_params(known, ["items"], None, run_pk=run_pk, map_index=-1)
                (row,) = executed(conn, (UPSTREAM_RESULTS, params))
                return row.result

            named = items_result({"other": "", attempt: ""})
            part_named = items_result({attempt[:8]: "", attempt[9:]: ""})
            sent = items_result({})
            conn.exec_driver_sql(  # a degenerate id is never taken for a named one
                f"UPDATE task_instance SET attempt_id = '' WHERE dag_run_id = {run_pk} "
                "AND task_id = 'items'"
            )
            conn.commit()
            empty_id = items_result({"other": "", attempt: ""})
    finally:
        engine.dispose()
    assert [(r.task_id, r.map_index, json.loads(r.result)) for r in read] == [
        ("echo", 7, "item-0007")
    ]
    # a named attempt's text is left out; parts of its id name nothing
    assert named is None
    assert sent is not None and json.loads(sent) == expected
    assert part_named == sent
    assert empty_id == sent
