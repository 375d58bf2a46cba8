"""`sluice status`: a live scheduler and worker, a finished run, text and --json."""

from __future__ import annotations

import io
import json
import textwrap

from rich.console import Console

from sluice.scheduler.cli.status import print_status, read_status
from tests.procs import Sluice, wait_until


def test_status_shows_live_jobs_runs_tis_and_workers(sluice: Sluice) -> None:
    # Given a live scheduler and worker, and one finished run
    (sluice.dags_folder / "hello.py").write_text(
        textwrap.dedent(
            """
            from sluice import DAG, task
            with DAG("hello", schedule=None) as dag:
                task(task_id="one")(lambda: 1)
                task(task_id="two")(lambda: 2)
            """
        )
    )
    sluice.scheduler()
    sluice.worker("default", concurrency=2)
    sluice.trigger("hello", "--run-id", "r1")
    assert sluice.wait_run("hello", "r1") == "success"

    # When status is asked (until the worker has answered once)
    def report() -> dict | None:
        body = json.loads(sluice.ok("status", "--json", "--workers-timeout", "0.5"))
        return body if body["workers"].get("default") else None

    body = wait_until(report, timeout=30)

    # Then: the scheduler is a live job, the run and TIs are counted, the worker is seen
    schedulers = [j for j in body["jobs"] if j["job_type"] == "scheduler"]
    assert len(schedulers) == 1 and schedulers[0]["alive"] is True
    assert schedulers[0]["heartbeat_age_seconds"] < 60
    assert body["runs"] == {"queued": 0, "running": 0, "success": 1, "failed": 0}
    assert body["task_instances"] == {"default": {"success": 2}}
    assert len(body["workers"]["default"]) == 1
    assert body["notes"] == []

    text = sluice.ok("status", "--workers-timeout", "0.5")
    for expected in ("Live jobs", "scheduler", "Runs by state", "success", "default"):
        assert expected in text, text
    assert "sluice@" in text


def test_status_without_jobs_or_workers_says_so(pg_url: str) -> None:
    from sluice.scheduler.core.db import make_engine, make_session_factory, utcnow
    from sluice.scheduler.core.settings import Settings

    settings = Settings(database_url=pg_url)
    engine = make_engine(pg_url)
    try:
        with make_session_factory(engine)() as session:
            report = read_status(session, settings, utcnow())
    finally:
        engine.dispose()
    assert report["jobs"] == [] and report["task_instances"] == {}
    report.update(workers={}, notes=[])
    out = io.StringIO()
    print_status(report, settings, Console(file=out, width=120))
    assert "no scheduler or backfill is running" in out.getvalue()
