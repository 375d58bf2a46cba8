"""`sluice standalone` as a user meets it: `--trigger` runs that one run and nothing else,
without it runs until Ctrl-C and says how to trigger, a standalone killed mid-run is
taken up at once by the next one, and every `--json` is one JSON document on stdout."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from sluice.scheduler.cli.main import build_parser
from tests.integration.test_cancel_run import rows
from tests.procs import SLUICE, run_sluice, standalone, wait_until

DAILY = """
from datetime import datetime, timezone
from sluice import DAG, task

with DAG("daily", schedule="@daily", start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
         catchup=False) as dag:
    task(task_id="first")(lambda: 1) >> task(task_id="second")(lambda: 2)
"""

PAIR = """
import logging
import os
import re
import sys
from sluice import DAG, ShellTask, task

print("pair.py prints at import")


def a():
    print("a prints")
    sys.stdout.write("a writes to sys.stdout\\n")
    logging.getLogger("user.code").warning("a logs a warning")
    os.system("echo a child process writes to fd 1")
    return 1


def b():
    print("b prints")
    return 2


with DAG("pair", schedule=None) as dag:
    task(task_id="a")(a) >> task(task_id="b")(b) >> ShellTask("sh", command="echo sh echoes")
"""

WATCHED = """
import sluice
from sluice import DAG, task

with DAG("watched", schedule=sluice.Watch(lambda context: [], interval=60)):
    @task(outlets=[sluice.Asset("file:///made")])
    def make():
        pass
"""

PRINTED = (
    "pair.py prints at import",
    "a prints",
    "a writes to sys.stdout",
    "a child process writes to fd 1",
    "b prints",
    "sh echoes",
)

HELD = """
import time
from datetime import timedelta
from pathlib import Path
from sluice import DAG, task

MARKS = Path({marks!r})


def hold(context):
    (MARKS / f"started-{{context['task_id']}}-{{context['try_number']}}").touch()
    while not (MARKS / "release").exists():
        time.sleep(0.05)
    return context["task_id"]


with DAG("held", schedule=None) as dag:
    held = [task(task_id=t, retries=1, retry_delay=timedelta(0))(hold) for t in "abc"]
    held >> task(task_id="after")(lambda: "after")
"""


def rows_once_there(url: str, sql: str) -> list[tuple[object, ...]] | None:
    """`rows`, or None while the schema is not created yet (a SQLite file not there yet is
    not created: standalone creates only a database that is not there)."""
    database = make_url(url).database
    if database and not Path(database).exists():
        return None
    try:
        return rows(url, sql)
    except OperationalError:
        return None


def env_for(url: str, dags: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLUICE_", "OTEL_"))}
    env.update(
        SLUICE_DATABASE_URL=url,
        SLUICE_DAGS_FOLDER=str(dags),
        SLUICE_LOOP_INTERVAL="0.2",
        SLUICE_HEARTBEAT_INTERVAL="0.5",
        PYTHONUNBUFFERED="1",
        **extra,
    )
    return env


@dataclass
class Background:
    """A `sluice standalone` started in its own process group, its output in files."""

    proc: subprocess.Popen[str]
    out: Path
    err: Path

    def stderr(self) -> str:
        return self.err.read_text()


@contextlib.contextmanager
def background(cwd: Path, env: dict[str, str], *args: str) -> Iterator[Background]:
    """`sluice standalone ARGS`, killed at the end if still running."""
    stamp = time.monotonic_ns()
    out, err = cwd / f"out-{stamp}.txt", cwd / f"err-{stamp}.txt"
    with out.open("w") as stdout, err.open("w") as stderr:
        proc = subprocess.Popen(
            [*SLUICE, "standalone", *args],
            env=env,
            cwd=cwd,
            stdout=stdout,
            stderr=stderr,
            text=True,
            start_new_session=True,
        )
    try:
        yield Background(proc, out, err)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def test_trigger_runs_exactly_the_triggered_run_to_its_end(tmp_path: Path) -> None:
    # Given an @daily DAG whose scheduled run is due (as example_etl's is)
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "daily.py").write_text(textwrap.dedent(DAILY))
    url = f"sqlite:///{tmp_path / 'sluice.db'}"
    # When the user runs `sluice standalone --trigger daily`
    done = standalone(tmp_path, dags, url, "--trigger", "daily", "--json")
    # Then exactly the triggered run ran, to its end, and no scheduled run was created
    assert done.returncode == 0, done.stderr[-3000:]
    document = json.loads(done.stdout)
    assert document["state"] == "success" and document["run_type"] == "manual"
    assert rows(url, "SELECT run_id, run_type, state FROM dag_run") == [
        (document["run_id"], "manual", "success")
    ]
    assert rows(url, "SELECT task_id, state FROM task_instance ORDER BY task_id") == [
        ("first", "success"),
        ("second", "success"),
    ]
    assert f"run {document['run_id']}: success" in done.stderr
    # and the jobs it ran ended (nothing left for `sluice status` to show as running)
    assert rows(url, "SELECT job_type, state FROM job ORDER BY job_type") == [
        ("scheduler", "success"),
        ("triggerer", "success"),
    ]


WAITS = """
import json
from datetime import timedelta
import sluice
from sluice import DAG, task
from sluice.triggers import Sleep

with DAG("waits", schedule=None) as dag:
    @task.sensor(poke_interval=0.2, timeout=30, mode="reschedule")
    def three_pokes(context):
        three_pokes.pokes = getattr(three_pokes, "pokes", 0) + 1
        return three_pokes.pokes >= 3

    @task
    def sleeps(context):
        if context["trigger_event"] is None:
            sluice.defer(Sleep(timedelta(seconds=0.5)))
        return sorted(context["trigger_event"])

    three_pokes >> sleeps
"""


def test_standalone_runs_sensors_and_deferred_tasks_in_its_process(tmp_path: Path) -> None:
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "waits.py").write_text(textwrap.dedent(WAITS))
    url = f"sqlite:///{tmp_path / 'sluice.db'}"
    done = standalone(tmp_path, dags, url, "--trigger", "waits", "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    document = json.loads(done.stdout)
    assert document["state"] == "success"
    assert rows(
        url, "SELECT task_id, state, try_number, result FROM task_instance ORDER BY task_id"
    ) == [
        ("sleeps", "success", 1, '["due"]'),
        ("three_pokes", "success", 1, None),
    ]


def test_standalone_without_trigger_says_how_to_trigger_and_runs_until_ctrl_c(
    tmp_path: Path,
) -> None:
    # Given `sluice standalone` started with no --trigger, on a relative SQLite file
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "pair.py").write_text(textwrap.dedent(PAIR))
    env = env_for("sqlite:///sluice.db", dags)
    with background(tmp_path, env) as started:
        # Then it says how to trigger a run from another terminal
        def hint() -> str | None:
            said = started.stderr()
            return said if "dags trigger pair\n" in said else None

        said = wait_until(hint, timeout=60)
        lines = said.splitlines()
        command = lines[lines.index("  trigger a run from another terminal:") + 1].strip()
        assert f"SLUICE_DATABASE_URL=sqlite:///{tmp_path / 'sluice.db'}" in command
        assert f"SLUICE_DAGS_FOLDER={dags}" in command and command.endswith("dags trigger pair")
        assert "DAGs in" in said and "pair" in said
        # When the user runs that command from another directory, with none of the settings
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        clean = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
        clean["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{clean.get('PATH', '')}"
        triggered = subprocess.run(
            ["bash", "-c", command],
            cwd=elsewhere,
            env=clean,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert triggered.returncode == 0, triggered.stderr
        run_id = triggered.stdout.strip()
        # Then the standalone runs it, and goes on until Ctrl-C
        url = f"sqlite:///{tmp_path / 'sluice.db'}"
        wait_until(lambda: rows(url, "SELECT state FROM dag_run") == [("success",)], timeout=30)
        # and says, a line each, how each of its tasks and the run ended
        wait_until(lambda: f"run pair {run_id}: success\n" in started.stderr(), timeout=10)
        for task_id in ("a", "b", "sh"):
            line = rf"(?m)^pair {re.escape(run_id)}  {task_id}\s+success\s"
            assert re.search(line, started.stderr()), started.stderr()
        assert started.proc.poll() is None
        started.proc.send_signal(signal.SIGINT)
        assert started.proc.wait(30) == 0
    assert rows(url, "SELECT run_id FROM dag_run") == [(run_id,)]
    assert started.out.read_text() == ""
    assert "a prints" in started.stderr()


def test_a_second_standalone_takes_up_at_once_what_a_killed_one_left(tmp_path: Path) -> None:
    # Given `sluice standalone --trigger held -c 1` killed (SIGKILL) with one task running
    # and two queued (their messages in its in-memory broker)
    dags, marks = tmp_path / "dags", tmp_path / "marks"
    dags.mkdir()
    marks.mkdir()
    (dags / "held.py").write_text(textwrap.dedent(HELD.format(marks=str(marks))))
    url = f"sqlite:///{tmp_path / 'sluice.db'}"
    # the sweeps would take up what it left only after an hour
    env = env_for(url, dags, SLUICE_QUEUED_TIMEOUT="3600", SLUICE_HEARTBEAT_TIMEOUT="3600")
    with background(tmp_path, env, "--trigger", "held", "-c", "1") as first:
        states = "SELECT state, count(*) FROM task_instance GROUP BY state ORDER BY state"
        wait_until(
            lambda: rows_once_there(url, states) == [("none", 1), ("queued", 2), ("running", 1)],
            timeout=60,
        )
        # the running try's body has begun (its claim comes a moment before)
        wait_until(lambda: any(marks.glob("started-*")), timeout=30)
        os.killpg(first.proc.pid, signal.SIGKILL)
        first.proc.wait(10)
    (started,) = [p.name for p in marks.glob("started-*")]
    (marks / "release").touch()
    # When the next `sluice standalone` starts
    with background(tmp_path, env) as second:
        began = time.monotonic()
        # Then it finishes the left run promptly: the queued tries are published again
        # at start, the try the killed process ran is failed (and retried) at start
        wait_until(lambda: rows(url, "SELECT state FROM dag_run") == [("success",)], timeout=30)
        took = time.monotonic() - began
        second.proc.send_signal(signal.SIGINT)
        assert second.proc.wait(30) == 0
    assert took < 20, took
    held_task = started.split("-")[1]
    tries = {task: n for task, n in rows(url, "SELECT task_id, try_number FROM task_instance")}
    assert tries == {**{t: 1 for t in "abc"}, held_task: 2, "after": 1}
    assert len(rows(url, "SELECT id FROM dag_run")) == 1
    err = second.stderr()
    assert "publishing again 2 queued tries" in err, err[-3000:]
    # and the killed one's job is no longer shown as running
    assert rows(url, "SELECT job_type, state FROM job ORDER BY job_type, id") == [
        ("scheduler", "failed"),
        ("scheduler", "success"),
        ("triggerer", "failed"),
        ("triggerer", "success"),
    ]


def commands_with_json() -> set[tuple[str, ...]]:
    """Every `sluice` command that has a --json option, as its words."""
    found: set[tuple[str, ...]] = set()

    def walk(parser: argparse.ArgumentParser, words: tuple[str, ...]) -> None:
        for action in parser._actions:
            if "--json" in action.option_strings:
                found.add(words)
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    walk(child, (*words, name))

    walk(build_parser(), ())
    return found


def test_every_json_option_writes_one_json_document_to_stdout(tmp_path: Path) -> None:
    # Given a DAG whose file and tasks print, log and start a child process that writes
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "pair.py").write_text(textwrap.dedent(PAIR))
    (dags / "watched.py").write_text(WATCHED)
    url = f"sqlite:///{tmp_path / 'sluice.db'}"
    # When `sluice standalone --trigger pair --json` runs it
    done = standalone(tmp_path, dags, url, "--trigger", "pair", "--json")
    # Then stdout is one JSON document; the prints, logs and status line are on stderr
    assert done.returncode == 0, done.stderr[-3000:]
    document = json.loads(done.stdout)
    assert [(t["task_id"], t["state"]) for t in document["tasks"]] == [
        ("a", "success"),
        ("b", "success"),
        ("sh", "success"),
    ]
    for printed in PRINTED:
        assert printed in done.stderr and printed not in done.stdout, printed
    assert "a logs a warning" in done.stderr
    assert "stopped without ending" not in done.stderr  # its own triggerer is not gone
    assert f"run {document['run_id']}: success" in done.stderr
    # and so is every other command's --json
    run_id = document["run_id"]
    env = env_for(url, dags, SLUICE_BROKER_URL="redis://127.0.0.1:1/0")
    argv = {
        ("standalone",): None,
        ("dags", "list"): ["dags", "list", "--json"],
        ("dags", "runs"): ["dags", "runs", "pair", "--json"],
        ("dags", "versions"): ["dags", "versions", "pair", "--json"],  # a folder's: []
        ("tasks", "states"): ["tasks", "states", "pair", run_id, "--json"],
        ("tasks", "explain"): ["tasks", "explain", "pair", run_id, "a", "--json"],
        ("status",): ["status", "--json", "--workers-timeout", "0.5"],
        ("assets", "list"): ["assets", "list", "--json"],
        ("concurrency", "list"): ["concurrency", "list", "--json"],
        ("users", "list"): ["users", "list", "--json"],
        ("tokens", "list"): ["tokens", "list", "--json"],
        ("dags", "watch-state"): ["dags", "watch-state", "watched", "--json"],
        ("connections", "list"): ["connections", "list", "--json"],
        ("variables", "list"): ["variables", "list", "--json"],
        ("connections", "add"): None,  # there --json is the connection given, not the output
    }
    assert commands_with_json() == set(argv), "a command with --json is not checked here"
    for words, args in argv.items():
        if args is None:
            continue
        shown = run_sluice(*args, env=env, timeout=60, cwd=tmp_path)
        assert shown.returncode == 0, (words, shown.stderr)
        json.loads(shown.stdout)  # one document, nothing else
