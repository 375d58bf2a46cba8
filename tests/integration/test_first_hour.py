"""What a new user meets in the terminal in their first hour: each test runs the `sluice`
command as they would and reads its stdout, stderr and exit code."""

from __future__ import annotations

import json
import os
import re
import subprocess
import textwrap
import time
from pathlib import Path

from tests.procs import Sluice, run_sluice, wait_until

FORKS = """
from sluice import DAG, task

with DAG("forks", schedule=None) as dag:
    @task.branch
    def choose():
        return "left"

    @task
    def left():
        return 1

    @task
    def right():
        return 2

    @task
    def after_right():
        return 3

    choose >> [left, right]
    right >> after_right
"""


def run(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`sluice ARGS` in `tmp_path` with none of this process's SLUICE_/OTEL_ settings but
    those given."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SLUICE_", "OTEL_"))}
    clean.update(env)
    return run_sluice(*args, env=clean, timeout=120, cwd=tmp_path)


def forks_run(tmp_path: Path) -> tuple[dict[str, str], str]:
    """The environment of a standalone SQLite database where `forks` ran once (its
    branch chose `left`), and that run's id."""
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "forks.py").write_text(textwrap.dedent(FORKS))
    env = {
        "SLUICE_DATABASE_URL": f"sqlite:///{tmp_path / 'sluice.db'}",
        "SLUICE_DAGS_FOLDER": str(dags),
        "SLUICE_LOOP_INTERVAL": "0.2",
    }
    done = run(tmp_path, "standalone", "--trigger", "forks", "--json", **env)
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    states = {t["task_id"]: t["state"] for t in document["tasks"]}
    assert states == {
        "choose": "success",
        "left": "success",
        "right": "skipped",
        "after_right": "skipped",
    }
    return env, document["run_id"]


def test_logs_of_skipped_tasks_say_they_were_skipped_and_why(tmp_path: Path) -> None:
    # Given a run whose branch skipped `right`, and `after_right` with it
    env, run_id = forks_run(tmp_path)

    # When the user asks for the logs of the tasks that were skipped
    right = run(tmp_path, "tasks", "logs", "forks", run_id, "right", **env)
    after = run(tmp_path, "tasks", "logs", "forks", run_id, "after_right", **env)

    # Then each says it was skipped, never ran, and why; nothing claims it will run
    for done in (right, after):
        assert done.returncode == 0, done.stderr
        assert done.stdout == ""
        assert "has not run yet" not in done.stderr
        assert len(done.stderr.splitlines()) == 1
    assert right.stderr.startswith(f"task 'right' of run '{run_id}' was skipped and never ran: ")
    assert "branch task 'choose' chose 'left', not this task" in right.stderr
    assert after.stderr.startswith(f"task 'after_right' of run '{run_id}' was skipped")
    assert "trigger rule all_success decided skipped from its upstream: 'right'" in after.stderr


def test_explain_of_finished_tasks_ends_without_a_note_about_workers(tmp_path: Path) -> None:
    # Given a run that ended: one task succeeded, one was skipped
    env, run_id = forks_run(tmp_path)

    for task_id, lead in (("left", "Succeeded"), ("right", "Skipped")):
        # When the user asks why the task is in its state
        done = run(tmp_path, "tasks", "explain", "forks", run_id, task_id, **env)

        # Then the answer says it, and ends without a word about workers
        assert done.returncode == 0, done.stderr
        lines = done.stdout.strip().splitlines()
        assert lines[1].startswith(lead)
        assert "worker" not in done.stdout, done.stdout
        data = json.loads(
            run(tmp_path, "tasks", "explain", "forks", run_id, task_id, "--json", **env).stdout
        )
        assert data["notes"] == []


def test_db_migrate_says_it_created_the_schema_then_that_it_is_current(tmp_path: Path) -> None:
    from sluice.scheduler.core.migrate import HEAD

    env = {"SLUICE_DATABASE_URL": f"sqlite:///{tmp_path / 'fresh.db'}"}

    # When the user creates the schema of a new database, then runs migrate again
    first = run(tmp_path, "db", "migrate", **env)
    again = run(tmp_path, "db", "migrate", **env)

    # Then the first says it created the schema and at which revision, the second that
    # the schema is current
    assert (first.returncode, first.stderr) == (0, "")
    assert first.stdout == f"created the schema at revision {HEAD}\n"
    assert (again.returncode, again.stderr) == (0, "")
    assert again.stdout == f"the schema is up to date (revision {HEAD})\n"


def test_db_migrate_of_an_older_schema_says_from_which_revision(tmp_path: Path) -> None:
    from alembic import command

    from sluice.scheduler.core.db import make_engine
    from sluice.scheduler.core.migrate import HEAD, _config

    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = make_engine(url)
    config = _config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "0009")
    engine.dispose()

    done = run(tmp_path, "db", "migrate", SLUICE_DATABASE_URL=url)

    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == f"upgraded the schema from revision 0009 to {HEAD}\n"


DAILY = """
from datetime import datetime, timedelta, timezone
from sluice import DAG, task

start = datetime.now(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
with DAG("daily", schedule="@daily", start_date=start - timedelta(days=1), catchup=False) as dag:
    @task
    def one():
        return 1

with DAG("caught_up", schedule="@daily", start_date=start - timedelta(days=3), catchup=True):
    @task
    def two():
        return 2
"""


def test_scheduler_does_not_say_a_run_it_just_created_already_exists(sluice: Sluice) -> None:
    # Given an @daily DAG with a run due, and one catching up on three days
    (sluice.dags_folder / "daily.py").write_text(textwrap.dedent(DAILY))
    sluice.extra_env["SLUICE_LOG_LEVEL"] = "INFO"

    # When a scheduler runs long enough to look for due runs several times
    proc = sluice.scheduler()
    counts = {"daily": 1, "caught_up": 3}

    def created() -> bool:
        from sqlalchemy import create_engine, text
        from sqlalchemy.pool import NullPool

        engine = create_engine(sluice.database_url, poolclass=NullPool)
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT dag_id, count(*) FROM dag_run GROUP BY dag_id"))
            found: dict[str, int] = {str(key): int(count) for key, count in rows.all()}
        engine.dispose()
        return found == counts

    wait_until(created, timeout=30)
    started = time.monotonic()
    log = next(sluice.log_dir.glob("scheduler-*.log"))
    wait_until(lambda: time.monotonic() - started > 2.5, timeout=5)  # 2 more looks at least
    sluice.stop(proc)

    # Then it created each run once, and never said it found one of them there already
    text = log.read_text()
    assert "already has a run" not in text, text
    for dag_id, n in counts.items():
        assert len(json.loads(sluice.ok("dags", "runs", dag_id, "--json"))) == n


def test_status_on_a_standalone_database_asks_no_broker(tmp_path: Path, sqlite_url: str) -> None:
    # Given the SQLite database of `sluice standalone`, and no SLUICE_BROKER_URL
    # When the user asks how things are
    started = time.monotonic()
    text = run(tmp_path, "status", SLUICE_DATABASE_URL=sqlite_url)
    took = time.monotonic() - started
    as_json = run(tmp_path, "status", "--json", SLUICE_DATABASE_URL=sqlite_url)

    # Then no broker is asked (no Redis on localhost db 0): the output says the broker is
    # standalone's embedded one
    assert text.returncode == 0, text.stderr
    assert "Workers per queue (not asked)" in text.stdout
    note = (
        "note: no broker asked: a SQLite database without SLUICE_BROKER_URL is sluice "
        "standalone's, whose embedded broker and worker live in its own process"
    )
    assert note in " ".join(text.stdout.split())
    assert "could not ask" not in text.stdout and "6379" not in text.stdout
    assert took < 10
    report = json.loads(as_json.stdout)
    assert report["workers"] is None
    assert report["notes"] == [note.removeprefix("note: ")]


def test_status_on_sqlite_with_a_broker_named_asks_that_broker(
    tmp_path: Path, sqlite_url: str
) -> None:
    from tests.redis_server import free_port

    # Given a SQLite database and a broker the user named (nothing listens there)
    broker = f"redis://127.0.0.1:{free_port()}/3"

    # When the user asks how things are
    env = {"SLUICE_DATABASE_URL": sqlite_url, "SLUICE_BROKER_URL": broker}
    done = run(tmp_path, "status", "--json", **env)

    # Then that broker was asked, and the note says it could not be reached
    assert done.returncode == 0, done.stderr
    [note] = json.loads(done.stdout)["notes"]
    assert note.startswith("could not ask the workers through the broker")


def test_every_option_of_every_command_has_a_help_text(tmp_path: Path) -> None:
    import argparse

    from sluice.scheduler.cli.main import build_parser

    def commands(
        parser: argparse.ArgumentParser, path: tuple[str, ...]
    ) -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
        found = [(path, parser)]
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    found += commands(child, (*path, name))
        return found

    missing = [
        f"sluice {' '.join(path)} {'/'.join(action.option_strings)}"
        for path, parser in commands(build_parser(), ())
        for action in parser._actions
        if action.option_strings
        and not isinstance(action, argparse._HelpAction)
        and not (action.help and action.help != argparse.SUPPRESS)
    ]
    assert missing == []

    # and the user sees them in `--help`, e.g. the ones a trigger takes
    done = run(tmp_path, "dags", "trigger", "--help")
    assert done.returncode == 0
    options = done.stdout.split("options:", 1)[1]
    for option, words in (
        ("--run-id", "run's id"),
        ("--logical-date", "logical date"),
        ("--conf", "JSON"),
    ):
        block = options.split(f"  {option}", 1)[1].split("\n  -", 1)[0]
        assert words in " ".join(block.split()), done.stdout


def test_sluice_help_names_every_environment_variable(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    read = set()
    for source in [
        root / "scheduler/core/settings.py",
        root / "scheduler/cli/main.py",
        *sorted((root / "scheduler/api").glob("*.py")),
    ]:
        read |= set(re.findall(r"\b(SLUICE_[A-Z_]+[A-Z])\b", source.read_text()))
    assert {"SLUICE_DATABASE_URL", "SLUICE_BROKER_URL", "SLUICE_DAGS_FOLDER"} <= read

    done = run(tmp_path, "--help")

    assert done.returncode == 0
    epilog = done.stdout.split("environment variables", 1)[1]
    assert sorted(name for name in read if name not in epilog) == []
    assert "OTEL_" in epilog
