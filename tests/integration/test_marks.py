"""`sluice tasks mark …` and `sluice dags mark …` on real schedulers and workers: a mark
stops the try it took, a task marked success starts its downstream through a wake-up
(the scheduler's loop is 30 s here), a run marked or holding a marked TI ends by its TIs;
bad input changes nothing."""

from __future__ import annotations

import textwrap
from pathlib import Path

from tests.integration.test_cancel_run import rows
from tests.procs import Sluice, wait_until, written

DAG = """
import time
from pathlib import Path
from sluice import DAG, task

MARKS = Path({marks!r})


def alert(context):
    with open(MARKS / "alerts", "a") as out:
        out.write(f"{{context['kind']}} {{context['task_id']}} {{context['run_id']}}\\n")


with DAG("marked", schedule=None) as dag:
    @task
    def a():
        pass

    @task(on_failure_callback=alert)
    def b(context):
        run = context["run_id"]
        (MARKS / f"b-started-{{run}}").write_text("")
        for tick in range(600):
            time.sleep(0.1)
        (MARKS / f"b-finished-{{run}}").write_text("")

    @task
    def c(context):
        (MARKS / f"c-{{context['run_id']}}").write_text("")

    a >> b >> c
"""


def write_dag(sluice: Sluice, tmp_path: Path) -> Path:
    marks = tmp_path / "marks"
    marks.mkdir()
    (sluice.dags_folder / "marked.py").write_text(textwrap.dedent(DAG.format(marks=str(marks))))
    sluice.run("dags", "list")
    return marks


def mark_to_start(sluice: Sluice, run_id: str) -> float:
    """Seconds from the mark of `b` (its audit event) to the start of `c`."""
    [(gap,)] = rows(
        sluice.database_url,
        "SELECT EXTRACT(EPOCH FROM ti.start_date - e.at) FROM task_instance ti "
        "JOIN dag_run r ON r.id = ti.dag_run_id JOIN audit_log e ON e.run_id = r.run_id "
        f"WHERE ti.task_id = 'c' AND r.run_id = '{run_id}' AND e.task_id = 'b' "
        "ORDER BY e.id DESC LIMIT 1",
    )
    return float(gap)  # type: ignore[arg-type]


def test_marks_on_running_and_ended_runs(sluice: Sluice, tmp_path: Path) -> None:
    marks = write_dag(sluice, tmp_path)
    sluice.extra_env["SLUICE_LOOP_INTERVAL"] = "30"  # only wake-ups move things here
    sluice.scheduler()
    sluice.worker()

    # Given b running, when b is marked success, then its try stops and c starts at once
    one = sluice.trigger("marked")
    wait_until(lambda: (marks / f"b-started-{one}").exists(), timeout=30)
    said = sluice.ok("tasks", "mark", "marked", one, "b", "--state", "success")
    assert "marked 1 task instance(s)" in said
    wait_until(lambda: (marks / f"c-{one}").exists(), timeout=5)
    wait_until(lambda: sluice.db_run_state("marked", one) == "success", timeout=5)
    print(f"mark of b -> start of c: {mark_to_start(sluice, one) * 1000:.0f} ms")
    states = sluice.db_task_states("marked", one)
    assert [states[t]["state"] for t in "abc"] == ["success"] * 3
    assert "mark success of task 'b' by " in sluice.ok("tasks", "explain", "marked", one, "b")

    # Given b running, when b is marked failed: the try stops, c never runs, the run fails
    two = sluice.trigger("marked")
    wait_until(lambda: (marks / f"b-started-{two}").exists(), timeout=30)
    sluice.ok("tasks", "mark", "marked", two, "b", "--state", "failed")
    wait_until(lambda: sluice.db_run_state("marked", two) == "failed", timeout=5)
    states = sluice.db_task_states("marked", two)
    assert (states["b"]["state"], states["b"]["error"]) == ("failed", "marked failed")
    assert states["c"]["state"] == "upstream_failed"
    # ... and b's failure callback ran once, for the mark
    assert written(marks / "alerts", timeout=10).splitlines() == [f"on_failure b {two}"]
    # ... and marking b success then gives c back: it runs and the run ends success
    sluice.ok("tasks", "mark", "marked", two, "b", "--state", "success")
    wait_until(lambda: sluice.db_run_state("marked", two) == "success", timeout=5)
    assert (marks / f"c-{two}").exists()

    # Given b running, when the run is marked success: every TI is success, b stopped
    three = sluice.trigger("marked")
    wait_until(lambda: (marks / f"b-started-{three}").exists(), timeout=30)
    said = sluice.ok("dags", "mark", "marked", three, "--state", "success")
    assert "1 queued or running tries stopped" in said
    assert sluice.db_run_state("marked", three) == "success"
    states = sluice.db_task_states("marked", three)
    assert [states[t]["state"] for t in "abc"] == ["success"] * 3
    # ... marked failed afterwards, the run is failed and its TIs stay as they are
    sluice.ok("dags", "mark", "marked", three, "--state", "failed")
    assert sluice.db_run_state("marked", three) == "failed"
    assert "mark failed of the run by " in sluice.ok("tasks", "explain", "marked", three, "c")
    # no stopped try ever finished, and c of the third run never ran
    for run in (one, two, three):
        assert not (marks / f"b-finished-{run}").exists()
    assert not (marks / f"c-{three}").exists()


def test_mark_selection_and_bad_input(sluice: Sluice, tmp_path: Path) -> None:
    write_dag(sluice, tmp_path)
    run_id = sluice.trigger("marked", "--run-id", "r1")  # queued: no scheduler here
    said = sluice.ok("tasks", "mark", "marked", run_id, "b", "--state", "skipped", "--upstream")
    assert "marked 2 task instance(s)" in said and "a, b" in said
    states = sluice.db_task_states("marked", run_id)
    assert [states[t]["state"] for t in "abc"] == ["skipped", "skipped", "none"]
    sluice.ok("tasks", "mark", "marked", run_id, "a", "--state", "failed", "--downstream")
    states = sluice.db_task_states("marked", run_id)
    assert [states[t]["state"] for t in "abc"] == ["failed"] * 3
    events = "SELECT count(*) FROM audit_log"
    assert rows(sluice.database_url, events) == [(5,)]
    before = sluice.db_task_states("marked", run_id)
    for args, said in [
        (("tasks", "mark", "nope", "r1", "a"), "sluice: error: unknown DAG 'nope'"),
        (("tasks", "mark", "marked", "r2", "a"), "sluice: error: DAG 'marked' has no run 'r2'"),
        (("tasks", "mark", "marked", "r1", "zz"), "sluice: error: run 'r1' of DAG 'marked' has no"),
        (("tasks", "mark", "marked", "r1", "a"), "sluice: error: task 'a' of run 'r1' is already"),
        (("dags", "mark", "nope", "r1"), "sluice: error: unknown DAG 'nope'"),
        (("dags", "mark", "marked", "r2"), "sluice: error: DAG 'marked' has no run 'r2'"),
    ]:
        state = "failed" if args[0] == "tasks" else "success"
        refused = sluice.cli(*args, "--state", state)
        assert refused.returncode == 2, refused
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
        assert refused.stderr.startswith(said), refused.stderr
    for args in [
        ("tasks", "mark", "marked", "r1", "a", "--state", "running"),
        ("dags", "mark", "marked", "r1", "--state", "skipped"),
        ("tasks", "mark", "marked", "r1", "a"),
    ]:
        refused = sluice.cli(*args)
        assert refused.returncode == 2, refused
    sluice.ok("dags", "mark", "marked", run_id, "--state", "failed")
    refused = sluice.cli("dags", "mark", "marked", run_id, "--state", "failed")
    assert refused.returncode == 2
    assert refused.stderr.startswith("sluice: error: run 'r1' of DAG 'marked' is already failed")
    assert rows(sluice.database_url, events) == [(6,)]
    assert sluice.db_task_states("marked", run_id) == before
