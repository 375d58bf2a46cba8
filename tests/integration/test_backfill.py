"""`sluice backfill`: --local runs from the local DAG files, Ctrl-C releases, bad input."""

from __future__ import annotations

import signal
import textwrap
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from tests.procs import Sluice, wait_until

VERSIONED = """
import os
from datetime import datetime, timezone
from sluice import DAG, task

def record(context):
    fd = os.open({log!r}, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(fd, f"{{context['run_id']}} {{context['task_id']}} {{os.getpid()}}\\n".encode())
    os.close(fd)

with DAG("versioned", schedule="@daily", start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
         catchup=False) as dag:
    @task
    def a(context):
        record(context)

    @task
    def b(context):
        record(context)
        {sleep}
    a >> b
"""


def rows(url: str, sql: str) -> list[tuple]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(text(sql)).all()]
    finally:
        engine.dispose()


def test_local_backfill_runs_the_local_version_in_process(sluice: Sluice, tmp_path: Path) -> None:
    log = tmp_path / "exec.log"
    (sluice.dags_folder / "versioned.py").write_text(
        textwrap.dedent(VERSIONED.format(log=str(log), sleep=""))
    )
    sluice.run("dags", "list")  # the deployed version: a >> b
    local = tmp_path / "checkout"
    local.mkdir()
    (local / "versioned.py").write_text(
        textwrap.dedent(
            VERSIONED.format(log=str(log), sleep="").replace(
                "    a >> b\n",
                "    @task\n    def c(context):\n        record(context)\n    a >> b >> c\n",
            )
        )
    )
    sluice.extra_env["SLUICE_DAGS_FOLDER"] = str(local)

    # no worker and no scheduler run: the backfill executes the tasks itself
    done = sluice.cli(
        "backfill", "versioned", "--start", "2026-04-01", "--end", "2026-04-03", "--local"
    )
    assert done.returncode == 0, done.stderr
    runs = rows(
        sluice.database_url,
        "SELECT run_id, state FROM dag_run WHERE run_type = 'backfill' ORDER BY run_id",
    )
    assert [r for r, _ in runs] == [f"backfill__2026-04-0{d}T00:00:00+00:00" for d in (1, 2, 3)]
    assert {s for _, s in runs} == {"success"}
    lines = [ln.split() for ln in log.read_text().splitlines()]
    assert sorted((r, t) for r, t, _ in lines) == sorted(
        (r, t) for r, _ in runs for t in ("a", "b", "c")
    )
    pids = {int(p) for _, _, p in lines}
    assert len(pids) == 1  # all in the backfill's own process
    # the stored DAG is still the deployed one: the local run did not rewrite it
    deployed = sluice.ok("dags", "list", "--json")
    assert '"tasks": 2' in deployed or "'tasks': 2" in deployed


def test_ctrl_c_releases_runs_to_the_schedulers(sluice: Sluice, tmp_path: Path) -> None:
    log = tmp_path / "exec.log"
    (sluice.dags_folder / "versioned.py").write_text(
        textwrap.dedent(VERSIONED.format(log=str(log), sleep="__import__('time').sleep(1)"))
    )
    sluice.run("dags", "list")
    sluice.worker(concurrency=2)
    backfill = sluice.start(
        "backfill",
        "backfill",
        "versioned",
        "--start",
        "2026-05-01",
        "--end",
        "2026-05-04",
        "--max-active-runs",
        "1",
    )
    wait_until(lambda: log.exists() and "b" in log.read_text().split(), timeout=30)
    backfill.send_signal(signal.SIGINT)
    assert backfill.wait(timeout=30) == 130
    claimed = rows(
        sluice.database_url, "SELECT count(*) FROM dag_run WHERE claimed_by_job_id IS NOT NULL"
    )
    assert claimed == [(0,)]
    sluice.scheduler()
    wait_until(
        lambda: (
            rows(
                sluice.database_url,
                "SELECT count(*) FROM dag_run WHERE state = 'success' AND run_type = 'backfill'",
            )
            == [(4,)]
        ),
        timeout=60,
    )


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["ghost", "--start", "2026-01-01", "--end", "2026-01-02"], "unknown DAG"),
        (["versioned", "--start", "2026-01-05", "--end", "2026-01-02"], "before --start"),
        (["versioned", "--start", "soon", "--end", "2026-01-02"], "ISO 8601"),
    ],
)
def test_backfill_bad_input(sluice: Sluice, tmp_path: Path, args: list[str], needle: str) -> None:
    (sluice.dags_folder / "versioned.py").write_text(
        textwrap.dedent(VERSIONED.format(log=str(tmp_path / "x"), sleep=""))
    )
    done = sluice.cli("backfill", *args)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and needle in done.stderr
    assert rows(sluice.database_url, "SELECT count(*) FROM dag_run") == [(0,)]


def test_rerun_failed_reruns_only_failed_dates_and_tasks(sluice: Sluice, tmp_path: Path) -> None:
    log, flag = tmp_path / "exec.log", tmp_path / "broken"
    flag.write_text("x")
    (sluice.dags_folder / "fragile.py").write_text(
        textwrap.dedent(f"""
    import os
    from datetime import datetime, timezone
    from sluice import DAG, task

    def record(context):
        with open({str(log)!r}, "a") as f:
            f.write(context["run_id"] + " " + context["task_id"] + "\\n")

    with DAG("fragile", schedule="@daily",
             start_date=datetime(2026, 1, 1, tzinfo=timezone.utc)) as dag:
        @task
        def steady(context):
            record(context)

        @task
        def shaky(context):
            record(context)
            if os.path.exists({str(flag)!r}):
                raise RuntimeError("broken today")

        steady >> shaky
    """)
    )
    dates = ["--start", "2026-06-01", "--end", "2026-06-02", "--local"]
    first = sluice.cli("backfill", "fragile", *dates)
    assert first.returncode == 1 and first.stdout.count("failed") == 2
    flag.unlink()
    # without --rerun-failed the dates are skipped; with it only the failed tasks run again
    assert sluice.cli("backfill", "fragile", *dates).stdout.count("skipped") == 2
    again = sluice.cli("backfill", "fragile", *dates, "--rerun-failed")
    assert again.returncode == 0, again.stderr
    runs = rows(sluice.database_url, "SELECT state FROM dag_run WHERE run_type = 'backfill'")
    assert sorted(runs) == [("success",), ("success",)]
    lines = log.read_text().split("\n")
    assert sum(" steady" in ln for ln in lines) == 2 and sum(" shaky" in ln for ln in lines) == 4
