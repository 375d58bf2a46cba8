"""The CLI as a user meets it: listing DAGs, bad input, and standalone on SQLite."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from tests.procs import Sluice, printed_states, run_sluice, standalone

GOOD = """
from sluice import DAG, task
with DAG("good", schedule="@hourly", start_date=__import__("datetime").datetime(
        2026, 1, 1, tzinfo=__import__("datetime").timezone.utc)) as dag:
    @task
    def only():
        return 1
"""


def count_runs(url: str) -> int:
    engine = create_engine(url)
    with engine.connect() as conn:
        n = conn.execute(text("SELECT count(*) FROM dag_run")).scalar_one()
    engine.dispose()
    return int(n)


def test_dags_list_shows_dags_and_broken_files(sluice: Sluice) -> None:
    (sluice.dags_folder / "good.py").write_text(GOOD)
    (sluice.dags_folder / "broken_dag.py").write_text(
        "from sluice import DAG\nraise ImportError('nope')\n"
    )
    (sluice.dags_folder / "cycle_dag.py").write_text(
        "from sluice import DAG, task\n"
        "with DAG('cyc', schedule=None) as dag:\n"
        "    @task\n    def a(): pass\n"
        "    @task\n    def b(): pass\n"
        "    a >> b\n    b >> a\n"
    )
    rows = json.loads(sluice.ok("dags", "list", "--json"))
    good = [r for r in rows if r["dag_id"] == "good"]
    assert good and good[0]["schedule"] == "@hourly" and good[0]["is_paused"] is False
    assert good[0]["fileloc"].endswith("good.py")
    errors = {Path(r["fileloc"]).name: r["import_error"] for r in rows if r["dag_id"] is None}
    assert set(errors) == {"broken_dag.py", "cycle_dag.py"}
    assert "nope" in errors["broken_dag.py"]
    assert "cycle" in errors["cycle_dag.py"].lower()
    # the good DAG keeps working next to the broken files
    assert sluice.trigger("good", "--run-id", "ok1") == "ok1"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["dags", "trigger", "nope"], "unknown DAG"),
        (["dags", "trigger", "good", "--conf", "{not json"], "--conf"),
        (["dags", "trigger", "good", "--conf", "[1]"], "JSON object"),
        (["dags", "trigger", "good", "--logical-date", "yesterday"], "ISO 8601"),
        (["dags", "trigger", "good", "--run-id", "taken"], "already has a run"),
        (["dags", "trigger", "good", "--run-id", "team/nightly"], "must not contain '/'"),
        (["dags", "trigger", "good", "--run-id", " padded"], "must not start or end"),
        (["dags", "state", "good", "missing"], "no run"),
        (["tasks", "states", "nope", "r"], "unknown DAG"),
        (["tasks", "clear", "good", "taken", "--task", "ghost"], "no task"),
    ],
)
def test_bad_input_one_line_exit_2_nothing_written(sluice: Sluice, args, needle) -> None:
    (sluice.dags_folder / "good.py").write_text(GOOD)
    sluice.trigger("good", "--run-id", "taken")
    before = count_runs(sluice.database_url)
    done = sluice.cli(*args)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], done.stderr
    assert "Traceback" not in done.stderr
    assert count_runs(sluice.database_url) == before


def test_unmigrated_database_is_one_line(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "SLUICE_DATABASE_URL": f"sqlite:///{tmp_path / 'empty.db'}",
        "SLUICE_DAGS_FOLDER": str(tmp_path),
    }
    done = run_sluice("dags", "list", env=env)
    assert done.returncode == 2
    assert "sluice db migrate" in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_standalone_runs_the_example_dag_on_sqlite(tmp_path: Path) -> None:
    examples = Path(__file__).resolve().parents[2] / "examples" / "dags"
    done = standalone(
        tmp_path,
        examples,
        f"sqlite:///{tmp_path / 'standalone.db'}",
        "--trigger",
        "example_etl",
        "--json",
        SLUICE_BROKER_URL="redis://127.0.0.1:1/0",  # ignored by standalone
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # stdout is the one JSON document; what the tasks print is on stderr
    states = {task_id: row["state"] for task_id, row in printed_states(done.stdout).items()}
    assert states == {
        "extract": "success",
        "total": "success",
        "biggest": "success",
        "check": "success",
        "report": "success",
        "alert": "skipped",
        "done": "success",
    }
    run_id = json.loads(done.stdout)["run_id"]
    assert f"run {run_id}: success" in done.stderr
    # the run's callback ran once, on the embedded worker, before standalone exited
    assert done.stderr.count(f"callback: example_etl {run_id} ended success") == 1


def test_sluice_help_runs() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "sluice.scheduler.cli.main", "--help"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0 and "standalone" in done.stdout


BACKFILL_CANCEL_MISUSED = [
    (["backfill", "cancel", "hourly", "--start", "2026-01-01"], "arguments: --start 2026-01-01"),
    (["backfill", "cancel", "hourly", "--local"], "unrecognized arguments: --local"),
    (["backfill", "cancel"], "the following arguments are required: DAG_ID"),
]


@pytest.mark.parametrize(("args", "needle"), BACKFILL_CANCEL_MISUSED)
def test_backfill_cancel_is_a_subcommand_with_arguments_of_its_own(
    tmp_path: Path, args: list[str], needle: str
) -> None:
    """Issue 40, 4: `backfill cancel` is a real subcommand, no longer a DAG id of
    `backfill` read again: a backfill's option, a second DAG or no DAG at all is a usage
    error before anything is read (the database here does not exist)."""
    env = {**os.environ, "SLUICE_DATABASE_URL": f"sqlite:///{tmp_path / 'none.db'}"}
    done = run_sluice(*args, env=env)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("sluice: error: ") and needle in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not (tmp_path / "none.db").exists()


def test_backfill_help_shows_the_dag_form_and_cancel_its_own() -> None:
    """`sluice backfill -h` is the DAG form's (as the README's `sluice backfill DAG_ID
    --start ISO --end ISO` line) and names `cancel`; `sluice backfill cancel -h` is
    cancel's alone."""
    dag_form = run_sluice("backfill", "-h")
    cancel = run_sluice("backfill", "cancel", "-h")
    assert dag_form.returncode == 0 and cancel.returncode == 0
    assert dag_form.stdout.startswith("usage: sluice backfill [-h] [--start START]")
    assert "DAG_ID" in dag_form.stdout and "sluice backfill cancel DAG_ID" in dag_form.stdout
    assert cancel.stdout.startswith("usage: sluice backfill cancel [-h] DAG_ID\n")
    assert "--start" not in cancel.stdout
