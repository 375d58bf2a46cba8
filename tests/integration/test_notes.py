"""`sluice dags note DAG_ID RUN_ID TEXT` and `sluice tasks note DAG_ID RUN_ID TASK_ID TEXT`:
one line each, kept with who and when, the newest shown by `sluice tasks explain`; bad
input is one line, exit 2, and writes nothing."""

from __future__ import annotations

from pathlib import Path

from tests.integration.test_cancel_run import rows, write_dag
from tests.procs import Sluice


def test_notes_on_a_run_and_a_task(sluice: Sluice, tmp_path: Path) -> None:
    write_dag(sluice, tmp_path)
    run_id = sluice.trigger("cancel_me", "--run-id", "r1")
    assert "noted on cancel_me r1" in sluice.ok("dags", "note", "cancel_me", run_id, "first try")
    sluice.ok("dags", "note", "cancel_me", run_id, "  rerun after the fix  ")
    sluice.ok("tasks", "note", "cancel_me", run_id, "slow", "the network was flaky")
    said = sluice.ok("tasks", "explain", "cancel_me", run_id, "slow")
    assert "note on task 'slow' by " in said and "the network was flaky" in said
    assert "note on the run by " in said and "rerun after the fix" in said
    assert "first try" not in said  # the newest note is the run's note
    assert "(cli)" in said
    other = sluice.ok("tasks", "explain", "cancel_me", run_id, "after")
    assert "rerun after the fix" in other and "flaky" not in other


def test_bad_notes_are_one_line_and_write_nothing(sluice: Sluice, tmp_path: Path) -> None:
    write_dag(sluice, tmp_path)
    sluice.trigger("cancel_me", "--run-id", "r1")
    cases = [
        (("dags", "note", "cancel_me", "r1", "   "), "a note cannot be empty"),
        (("dags", "note", "cancel_me", "r1", "x" * 501), "a note is at most 500 characters"),
        (("dags", "note", "cancel_me", "r1", "two\nlines"), "a note is one line of text"),
        (("dags", "note", "cancel_me", "r1", "bell\x07"), "a note is one line of text"),
        (("dags", "note", "nope", "r1", "hi"), "unknown DAG 'nope'"),
        (("dags", "note", "cancel_me", "r2", "hi"), "DAG 'cancel_me' has no run 'r2'"),
        (("tasks", "note", "cancel_me", "r1", "nope", "hi"), "has no task 'nope'"),
    ]
    for args, said in cases:
        refused = sluice.cli(*args)
        assert refused.returncode == 2, (args, refused)
        lines = refused.stderr.strip().splitlines()
        assert len(lines) == 1 and said in lines[0], (args, refused.stderr)
    assert rows(sluice.database_url, "SELECT count(*) FROM audit_log") == [(0,)]
