"""A run ends in step with its DAG's current stored version (issue 39, item 1).

Whoever ends a run (a scheduler's `update_state`, a worker's result path) first brings the
run's task instances in step with the DAG's stored version: a task added while the run was
under way is created and run before the run may end, a task dropped is `removed`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.test_pipeline import executions, write_dag
from tests.procs import Sluice, wait_until

BODY = """
with DAG("{dag_id}", schedule=None) as dag:
    @task(queue="later")
    def a():
        record("{dag_id}.a")

    @task
    def {second}():
        record("{dag_id}.{second}")

    a >> {second}
"""


@pytest.mark.long
def test_a_task_added_while_the_first_was_queued_runs_before_the_run_ends(
    sluice: Sluice, tmp_path: Path
) -> None:
    """The scenario of the issue, five times: `a >> b`, `a` queued on a queue no worker
    serves; the file becomes `a >> c`; a scheduler and a worker serving both queues start
    together. The run must end `success` with `a` success, `b` removed and `c` run."""
    log = tmp_path / "executions.log"
    for i in range(5):
        _flip(sluice, log, f"flip{i}")


def _flip(sluice: Sluice, log: Path, dag_id: str) -> None:
    # Given r1 of `a >> b` whose `a` waits, queued, on a queue no worker serves
    write_dag(sluice.dags_folder, dag_id, BODY.format(dag_id=dag_id, second="b"), log)
    scheduler = sluice.scheduler()
    run_id = sluice.trigger(dag_id, "--run-id", "r1")
    wait_until(lambda: sluice.db_task_states(dag_id, run_id)["a"]["state"] == "queued")
    sluice.stop(scheduler)
    # When the file becomes `a >> c`, and a scheduler and a worker start together
    write_dag(sluice.dags_folder, dag_id, BODY.format(dag_id=dag_id, second="c"), log)
    started = [sluice.scheduler(), sluice.worker("default,later")]
    # Then `c` is created and runs before the run ends
    assert sluice.wait_run(dag_id, run_id) == "success", sluice.logs()
    got = {t: s["state"] for t, s in sluice.db_task_states(dag_id, run_id).items()}
    assert got == {"a": "success", "b": "removed", "c": "success"}, (dag_id, sluice.logs())
    ran = [e for e in executions(log) if e.startswith(f"{dag_id}.")]
    assert sorted(ran) == [f"{dag_id}.a", f"{dag_id}.c"]
    for proc in started:
        sluice.stop(proc)
