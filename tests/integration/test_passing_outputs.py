"""A task's return value passed to another as an argument (`load(list_files())`), on a
real scheduler and worker: the dependency is added, the worker passes the result, and
`context` keeps working beside the arguments."""

from __future__ import annotations

import json
import textwrap

from tests.integration.test_cancel_run import rows
from tests.procs import Sluice

DAG = """
from sluice import DAG, task

with DAG("passing", schedule=None) as dag:
    @task
    def list_files():
        return ["a.csv", "b.csv", "c.csv"]

    @task(retries=1)
    def load(paths, table):
        return {"table": table, "rows": [len(p) for p in paths]}

    @task
    def total(loaded, context):
        return {"sum": sum(loaded["rows"]), "try": context["try_number"]}

    total(load(list_files(), table="raw"))
"""


def test_outputs_flow_into_arguments(sluice: Sluice) -> None:
    (sluice.dags_folder / "passing.py").write_text(textwrap.dedent(DAG))
    sluice.run("dags", "list")
    sluice.scheduler()
    sluice.worker()
    run_id = sluice.trigger("passing")
    assert sluice.wait_run("passing", run_id) == "success"
    found = rows(sluice.database_url, "SELECT task_id, result FROM task_instance ORDER BY id")
    results = {str(task_id): result for task_id, result in found}
    assert json.loads(str(results["load"])) == {"table": "raw", "rows": [5, 5, 5]}
    assert json.loads(str(results["total"])) == {"sum": 15, "try": 1}
