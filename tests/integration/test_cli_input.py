"""The CLI's input as a user meets it: what the database or a terminal cannot take is one
line on stderr and exit code 2, nothing is written and the system keeps working; stored
data is shown as data (rich tables and task logs).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import pty
import subprocess
from collections.abc import Iterator

import pytest
from sqlalchemy import func, select, update

from sluice.scheduler.cli.render import cell, visible
from sluice.scheduler.control.operations import trigger_run
from sluice.scheduler.core.db import make_engine, make_session_factory, transaction, utcnow
from sluice.scheduler.core.models import Dag, DagRun, Pool, TaskInstance
from sluice.scheduler.core.queries.task_logs import LogSnapshot, save_task_log
from sluice.scheduler.scheduling.dagbag import sync_dag_folder
from tests.procs import Sluice

GOOD = """
from sluice import DAG, task
with DAG("good", schedule=None) as dag:
    @task
    def only():
        return 1
"""

TERMINAL_CONTROL = "\x1b[2J\x1b]8;;http://evil.example\x1b\\click\x1b]8;;\x1b\\\r\x07"
LOG = f"line one\n\tindented\n{TERMINAL_CONTROL}\nlast"


@pytest.fixture
def good(sluice: Sluice) -> Iterator[Sluice]:
    """The DAG `good` synced (as the CLI would), with a run `r1` whose task has a log."""
    (sluice.dags_folder / "good.py").write_text(GOOD)
    engine = make_engine(sluice.database_url)
    factory = make_session_factory(engine)
    sync_dag_folder(factory, sluice.dags_folder, parse_timeout=20, now=utcnow())
    with transaction(factory) as session:
        dag = session.get(Dag, "good")
        assert dag is not None
        run = trigger_run(session, dag, now=utcnow(), run_id="r1")
        session.flush()
        ti = session.scalars(select(TaskInstance).where(TaskInstance.dag_run_id == run.id)).one()
        now = dt.datetime.now(dt.UTC)
        session.execute(update(TaskInstance).where(TaskInstance.id == ti.id).values(try_number=1))
        save_task_log(session, LogSnapshot(ti.id, 1, "a" * 36, "h1", LOG, 0, now, now), now=now)
    engine.dispose()
    yield sluice


def rows(sluice: Sluice) -> tuple[int, int]:
    """(runs, pools) in the database."""
    engine = make_engine(sluice.database_url)
    try:
        with make_session_factory(engine)() as session:
            runs = session.scalar(select(func.count()).select_from(DagRun))
            pools = session.scalar(select(func.count()).select_from(Pool))
            return int(runs or 0), int(pools or 0)
    finally:
        engine.dispose()


def still_works(sluice: Sluice) -> None:
    """A write and a read by the same code the CLI runs, on the same database."""
    engine = make_engine(sluice.database_url)
    try:
        with transaction(make_session_factory(engine)) as session:
            dag = session.get(Dag, "good")
            assert dag is not None
            run = trigger_run(session, dag, now=utcnow(), run_id="after", conf={"ok": [1]})
            assert run.id is not None
        with make_session_factory(engine)() as session:
            stored = session.scalar(select(DagRun.conf).where(DagRun.run_id == "after"))
            assert stored == {"ok": [1]}
    finally:
        engine.dispose()


def one_line(done: subprocess.CompletedProcess[str], needle: str) -> str:
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("sluice: error: ") and needle in lines[0], lines[0]
    return lines[0]


NUL_KEY = '{"k\\u0000": 1}'
BAD = [
    (["dags", "trigger", "good", "--logical-date", "9999-12-31T23:59:59-01:00"], "out of range"),
    (["dags", "trigger", "good", "--logical-date", "0001-01-01T00:00:00+05:00"], "out of range"),
    (["dags", "trigger", "good", "--conf", '{"x": NaN}'], "NaN or Infinity"),
    (["dags", "trigger", "good", "--conf", '{"x": {"y": [Infinity]}}'], '["x"]["y"][0]'),
    (["dags", "trigger", "good", "--conf", '{"k": "\\ud800"}'], "lone surrogate"),
    (["dags", "trigger", "good", "--conf", NUL_KEY], "NUL"),
    (["dags", "trigger", "good", "--conf", json.dumps({"p": "x" * 70_000})], "MAX_CONF_BYTES"),
    (["dags", "trigger", "good", "--conf", '{"n": ' + "9" * 5000 + "}"], "--conf"),
    (["dags", "trigger", "good", "--run-id", "."], "only of dots"),
    (["dags", "trigger", "good", "--run-id", ".."], "only of dots"),
    (["dags", "trigger", "good", "--run-id", "a\x1b[31mb"], "control characters"),
    (["dags", "trigger", os.fsdecode(b"go\xffod")], "not valid UTF-8"),
    (["dags", "trigger", "good", "--run-id", os.fsdecode(b"\xc3\x28")], "argument 5"),
    (["pools", "set", "p1", "9999999999"], "between 0 and 2147483647"),
    (["pools", "set", "p" * 300, "5"], "at most 250"),
    (["pools", "set", "bad\x07pool", "5"], "control characters"),
    (["tasks", "logs", "good", "r1", "only", "--try", "3000000000"], "--try"),
    (["status", "--workers-timeout", "inf"], "--workers-timeout"),
]


@pytest.mark.parametrize(("args", "needle"), BAD, ids=[" ".join(a)[:60] for a, _ in BAD])
def test_bad_input_is_one_line_exit_2_nothing_written(good: Sluice, args, needle) -> None:
    before = rows(good)

    line = one_line(good.cli(*args), needle)

    assert "Traceback" not in line
    assert rows(good) == before
    still_works(good)


def test_an_unreachable_database_is_one_line_naming_the_host(sluice: Sluice) -> None:
    sluice.extra_env["SLUICE_DATABASE_URL"] = (
        "postgresql+psycopg://sluice:hunter2@127.0.0.1:1/sluice"
    )
    done = sluice.cli("dags", "list")

    line = one_line(done, "127.0.0.1:1")
    assert "hunter2" not in done.stderr and "sluice:hunter2" not in done.stderr
    assert "refused" in line.lower()


def test_tables_show_markup_and_control_characters_as_data(good: Sluice) -> None:
    folder = good.dags_folder
    header = "from sluice import DAG\n"
    (folder / "markup_dag.py").write_text(header + "raise ImportError('bad [/nope] here')\n")
    (folder / "link_dag.py").write_text(
        header + "raise ImportError('[link=http://evil.example]click[/link] \\x1b[31mred')\n"
    )
    engine = make_engine(good.database_url)
    with transaction(make_session_factory(engine)) as session:
        session.execute(
            update(TaskInstance).values(error="[bold]boom[/] [link=http://x]y[/link] \x1b[5m")
        )
    engine.dispose()
    good.extra_env["COLUMNS"] = "1000"  # rich: wide enough that no cell is cut

    listed = good.cli("dags", "list")
    states = good.cli("tasks", "states", "good", "r1")

    assert listed.returncode == 0, listed.stderr
    assert "[/nope]" in listed.stdout and "[link=http://evil.example]click[/link]" in listed.stdout
    assert "\\x1b[31mred" in listed.stdout and "\x1b" not in listed.stdout
    assert "good" in listed.stdout
    assert states.returncode == 0, states.stderr
    assert "[bold]boom[/] [link=http://x]y[/link] \\x1b[5m" in states.stdout
    assert "\x1b" not in states.stdout


def test_logs_are_printed_as_stored_when_piped(good: Sluice) -> None:
    done = subprocess.run(
        [*good.argv, "tasks", "logs", "good", "r1", "only"],
        env=good.env,
        capture_output=True,
        timeout=60,
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout == (LOG + "\n").encode()
    assert b"try 1 on h1" in done.stderr


def _on_a_terminal(sluice: Sluice, *args: str) -> tuple[int, str]:
    """Run `sluice ARGS` with stdout on a pseudo-terminal; (exit code, what it showed)."""
    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen(
            [*sluice.argv, *args],
            env=sluice.env,
            stdout=follower,
            stderr=subprocess.PIPE,
        )
        os.close(follower)
        shown = b""
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:  # EIO: the process closed the terminal
                break
            if not data:
                break
            shown += data
        proc.communicate(timeout=60)
    finally:
        os.close(leader)
    return proc.returncode, shown.decode().replace("\r\n", "\n")


def test_logs_on_a_terminal_spell_control_characters_out(good: Sluice) -> None:
    code, shown = _on_a_terminal(good, "tasks", "logs", "good", "r1", "only")

    assert code == 0
    assert shown == visible(LOG, keep_lines=True) + "\n"
    assert "\x1b" not in shown and "\x07" not in shown
    assert "line one\n\tindented\n\\x1b[2J\\x1b]8;;http://evil.example" in shown


def test_logs_on_a_terminal_with_raw_are_as_stored(good: Sluice) -> None:
    code, shown = _on_a_terminal(good, "tasks", "logs", "good", "r1", "only", "--raw")

    assert code == 0
    assert "\x1b[2J\x1b]8;;http://evil.example" in shown


def test_cells_and_visible_text() -> None:
    assert visible("a\x1b[1mb\tc\nd\x7f\x9b") == "a\\x1b[1mb\tc\\x0ad\\x7f\\x9b"
    assert visible("a\nb\r", keep_lines=True) == "a\nb\\x0d"
    assert cell("[red]x[/]").plain == "[red]x[/]" and cell(None).plain == ""
    assert cell(3).plain == "3" and not cell("[b]x[/b]").spans
