"""Errors that name their cause, as a user meets them in the terminal.

An unknown DAG id says which DAG file failed to import and why, on every command that
looks a DAG up and on every call (not only the one whose parse found the error); a DAGs
folder that is not there is refused by name, with exit code 2, before anything is
written; `sluice standalone` in a directory without a DAGs folder creates no database.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from tests.procs import Sluice, run_sluice, wait_until

GOOD = """
from sluice import DAG, task
with DAG("good", schedule=None) as dag:
    @task
    def only():
        return 1
"""

BROKEN = """
from sluice import DAG, task
with DAG("broken", schedule=None) as dag:
    @task
    def only():
        return 1
    ratio = 1 / 0
"""


def last_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    return lines[-1] if lines else ""


def count(url: str, table: str) -> int:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one())
    finally:
        engine.dispose()


def test_an_unknown_dag_names_the_file_that_failed_and_why(sluice: Sluice) -> None:
    (sluice.dags_folder / "good.py").write_text(GOOD)
    (sluice.dags_folder / "broken.py").write_text(BROKEN)
    first = sluice.cli("dags", "trigger", "broken")
    assert first.returncode == 2, first.stderr
    assert "Traceback" not in first.stderr
    expected = (
        "sluice: error: unknown DAG 'broken' (not in "
        f"{sluice.dags_folder}); broken.py failed to import: "
        "ZeroDivisionError: division by zero (broken.py, line 7)"
    )
    assert last_line(first.stderr) == expected
    # every later call says it too (the file is not parsed again: one line only)
    for args in (
        ("dags", "trigger", "broken"),
        ("dags", "pause", "broken"),
        ("dags", "state", "broken", "r1"),
        ("tasks", "states", "broken", "r1"),
        ("tasks", "explain", "broken", "r1", "only"),
        ("backfill", "broken", "--start", "2026-01-01", "--end", "2026-01-02"),
    ):
        done = sluice.cli(*args)
        assert done.returncode == 2, (args, done.stderr)
        assert done.stderr.strip() == expected, (args, done.stderr)
    # --local imports the file itself and says why it does not load
    local = sluice.cli(
        "backfill", "broken", "--start", "2026-01-01", "--end", "2026-01-02", "--local"
    )
    assert local.returncode == 2
    assert local.stderr.strip() == (
        "sluice: error: broken.py does not load: "
        "ZeroDivisionError: division by zero (broken.py, line 7)"
    )
    assert count(sluice.database_url, "dag_run") == 0
    # the good DAG works beside it
    assert sluice.trigger("good", "--run-id", "g1") == "g1"


def test_the_file_naming_the_dag_comes_first_and_the_line_is_bounded(sluice: Sluice) -> None:
    noisy = "x" * 5000
    for name in ("a_dag.py", "b_dag.py", "c_dag.py"):
        (sluice.dags_folder / name).write_text(
            f"from sluice import DAG\nraise ValueError('\\x1b[31m{noisy}\\nsecond line')\n"
        )
    (sluice.dags_folder / "z_report.py").write_text(BROKEN.replace('"broken"', '"report"'))
    done = sluice.cli("dags", "trigger", "report")
    assert done.returncode == 2
    line = last_line(done.stderr)
    assert line.startswith(
        "sluice: error: unknown DAG 'report' (not in "
        f"{sluice.dags_folder}); 4 DAG files failed to import: z_report.py: "
        "ZeroDivisionError: division by zero (z_report.py, line 7); a_dag.py: ValueError: "
        "\\x1b[31mxxx"
    ), line
    assert line.endswith("...; and 2 more (sluice dags list)"), line
    assert "\x1b" not in done.stderr and "second line" not in line
    assert len(line) < 700


@pytest.mark.parametrize(
    "args",
    [
        ("dags", "list"),
        ("dags", "list", "--json"),
        ("dags", "trigger", "good"),
        ("dags", "pause", "good"),
        ("backfill", "good", "--start", "2026-01-01", "--end", "2026-01-02"),
        ("backfill", "good", "--start", "2026-01-01", "--end", "2026-01-02", "--local"),
        ("scheduler",),
        ("standalone", "--trigger", "good"),
    ],
)
def test_a_dags_folder_that_is_not_there_is_refused_by_name(
    sluice: Sluice, tmp_path: Path, args: tuple[str, ...]
) -> None:
    (sluice.dags_folder / "good.py").write_text(GOOD)
    sluice.run("dags", "list")  # the DAG is known from the right folder
    sluice.extra_env["SLUICE_DAGS_FOLDER"] = "exmaples/dags"  # mistyped, relative
    sluice.cwd = tmp_path
    done = sluice.cli(*args, timeout=30)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == ""
    assert done.stderr.strip() == (
        f"sluice: error: the DAGs folder exmaples/dags ({tmp_path}/exmaples/dags) does not "
        "exist: set SLUICE_DAGS_FOLDER to the folder of your DAG files"
    )
    assert count(sluice.database_url, "dag_run") == 0
    assert count(sluice.database_url, "job") == 0
    assert count(sluice.database_url, "dag WHERE is_active") == 1  # nothing retired


def test_a_file_given_as_the_dags_folder_is_refused(sluice: Sluice) -> None:
    not_a_folder = sluice.dags_folder / "good.py"
    not_a_folder.write_text(GOOD)
    sluice.extra_env["SLUICE_DAGS_FOLDER"] = str(not_a_folder)
    done = sluice.cli("dags", "list")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"sluice: error: the DAGs folder {not_a_folder} is not a folder: "
        "set SLUICE_DAGS_FOLDER to the folder of your DAG files"
    )


@pytest.mark.parametrize(
    "args",
    [("standalone",), ("standalone", "--trigger", "example_etl"), ("standalone", "-c", "0")],
)
def test_standalone_in_an_empty_directory_writes_nothing(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLUICE_", "OTEL_"))}
    done = run_sluice(*args, env=env, cwd=tmp_path, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    if "-c" in args:
        assert lines[0] == "sluice: error: -c/--concurrency must be between 1 and 1024, got 0"
    else:
        assert lines[0] == (
            f"sluice: error: the DAGs folder dags ({tmp_path}/dags) does not exist: "
            "set SLUICE_DAGS_FOLDER to the folder of your DAG files"
        )
    assert list(tmp_path.iterdir()) == []  # no sluice.db


def test_standalone_triggering_an_unknown_dag_leaves_no_database(tmp_path: Path) -> None:
    # a DAGs folder with one good DAG file and one that fails, no database yet
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "good.py").write_text(
        "from sluice import DAG, task\n"
        "with DAG('good', schedule=None) as dag:\n"
        "    @task\n"
        "    def one():\n"
        "        return 1\n"
    )
    (dags / "broken.py").write_text("from sluice import DAG\nimport no_such_module_here\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLUICE_", "OTEL_"))}
    done = run_sluice("standalone", "--trigger", "broken", env=env, cwd=tmp_path, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("sluice: error: unknown DAG 'broken' (not in dags); broken.py failed")
    assert "no_such_module_here" in last
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dags"]  # no sluice.db


def test_a_command_on_a_missing_sqlite_file_does_not_create_it(tmp_path: Path) -> None:
    (tmp_path / "dags").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLUICE_", "OTEL_"))}
    for args in (("dags", "list"), ("dags", "state", "a", "b"), ("status",)):
        done = run_sluice(*args, env=env, cwd=tmp_path, timeout=60)
        assert done.returncode == 2, done.stdout + done.stderr
        assert done.stderr.strip() == (
            "sluice: error: there is no database at sluice.db: run `sluice db migrate` to "
            "create it (or set SLUICE_DATABASE_URL)"
        )
    assert not (tmp_path / "sluice.db").exists()


def test_a_scheduler_whose_dags_folder_goes_away_keeps_its_dags(sluice: Sluice) -> None:
    (sluice.dags_folder / "good.py").write_text(GOOD)
    sluice.scheduler()
    wait_until(lambda: count(sluice.database_url, "dag WHERE is_active") == 1, timeout=30)
    moved = sluice.dags_folder.with_name("moved")
    shutil.move(sluice.dags_folder, moved)
    log = sluice.log_dir / "scheduler-0.log"
    wait_until(lambda: "is gone" in log.read_text(), timeout=30)
    assert f"the DAGs folder {sluice.dags_folder} is gone" in log.read_text()
    shutil.move(moved, sluice.dags_folder)
    wait_until(lambda: "is back" in log.read_text(), timeout=30)
    assert count(sluice.database_url, "dag WHERE is_active") == 1
    assert "Traceback" not in log.read_text()
