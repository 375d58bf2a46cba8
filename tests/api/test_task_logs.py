"""Capturing each try's stdout, stderr and logging into `task_log`: the buffer's cap,
per-thread capture (as in the threads pool of `sluice standalone`), and a real
prefork `sluice worker` running a DAG with Python and shell tasks."""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import os
import sys
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from sqlalchemy import Engine, event, select
from sqlalchemy.orm import Session, sessionmaker

from sluice.broker.wakeup import LocalWaker
from sluice.broker.worker.runner import Outcome, WorkerContext, run_task_instance
from sluice.broker.worker.task_logs import LogBuffer, TaskLogCapture
from sluice.scheduler.cli.context import Cli, CliError
from sluice.scheduler.cli.logs_cmd import add_logs_parser
from sluice.scheduler.core.db import make_engine, make_session_factory, transaction, utcnow
from sluice.scheduler.core.messages import RunMessage
from sluice.scheduler.core.models import Dag, TaskInstance, TaskLog
from sluice.scheduler.core.queries.task_logs import save_task_log
from sluice.scheduler.core.settings import Settings
from sluice.scheduler.core.states import TI, RunType
from sluice.scheduler.core.transitions import move_ti
from sluice.scheduler.scheduling.dagbag import sync_dag_folder
from sluice.scheduler.scheduling.dagrun import create_dagrun
from sluice.tasks.loader import DagCache
from tests.procs import Sluice

# -- the buffer ----------------------------------------------------------------------------


def test_buffer_keeps_the_newest_lines_within_the_cap() -> None:
    buffer = LogBuffer(max_bytes=200)
    for i in range(50):
        buffer.write("stdout", f"line {i:02d}\n", when=0.0)

    text, dropped, _ = buffer.snapshot()

    lines = text.split("\n")
    assert lines[-1] == "1970-01-01T00:00:00.000Z [stdout] line 49"
    assert len(text.encode()) + 1 <= 200
    assert dropped == 50 - len(lines)
    assert [int(line.rsplit(" ", 1)[1]) for line in lines] == list(range(dropped, 50))


def test_buffer_joins_partial_writes_and_cleans_text() -> None:
    buffer = LogBuffer(max_bytes=10_000)
    buffer.write("stdout", "hel", when=0.0)
    buffer.write("stderr", "oops\n", when=0.0)
    buffer.write("stdout", "lo\x00 \ud800\nnext", when=0.0)
    buffer.close()

    text, dropped, _ = buffer.snapshot()

    assert text.split("\n") == [
        "1970-01-01T00:00:00.000Z [stderr] oops",
        "1970-01-01T00:00:00.000Z [stdout] hello\ufffd ?",
        text.split("\n")[2],
    ]
    assert text.endswith("[stdout] next") and dropped == 0


def test_a_line_longer_than_the_cap_is_cut() -> None:
    buffer = LogBuffer(max_bytes=100)
    buffer.write("stdout", "é" * 500 + "\n")
    text, _, _ = buffer.snapshot()
    assert len(text.encode()) < 100 and text.endswith("é")


# -- per-thread capture, in one process ----------------------------------------------------

THREAD_DAG = """
import logging
import sys
import threading
import time

from sluice import DAG, ShellTask, task

with DAG("threads", schedule=None) as dag:
    for name in ("a", "b", "c"):
        @task(task_id=f"py_{name}")
        def chatty(context):
            me = context["task_id"]
            for i in range(20):
                print(f"{me} out {i}")
                sys.stderr.write(f"{me} err {i}\\n")
                logging.getLogger("user.code").warning("%s log %s", me, i)
                time.sleep(0.002)
            child = threading.Thread(target=lambda: print(f"{me} from a child thread"))
            child.start()
            child.join()
            if me == "py_c":
                raise ValueError(f"{me} fails on purpose")
            return me

    ShellTask("sh", command="echo shell says $SLUICE_TASK_ID; echo shell complains >&2")
"""


@pytest.fixture
def threads_dag(pg_url: str, tmp_path: Path) -> Iterator[tuple[sessionmaker[Session], int]]:
    """A run of the `threads` DAG, synced from its file; yields the factory and run pk."""
    folder = tmp_path / "dags"
    folder.mkdir()
    (folder / "threads_dag.py").write_text(THREAD_DAG)
    engine: Engine = make_engine(pg_url)
    factory = make_session_factory(engine)
    sync_dag_folder(factory, folder, parse_timeout=20, now=utcnow())
    with transaction(factory) as session:
        dag = session.get(Dag, "threads")
        assert dag is not None
        run = create_dagrun(
            session, dag, run_type=RunType.MANUAL, logical_date=utcnow(), now=utcnow()
        )
    yield factory, run.id
    engine.dispose()


def queue(factory: sessionmaker[Session], run_pk: int) -> list[RunMessage]:
    """Every TI of the run queued with a fresh attempt id, as a scheduler would."""
    messages = []
    with transaction(factory) as session:
        tis = session.scalars(select(TaskInstance).where(TaskInstance.dag_run_id == run_pk))
        for ti in tis:
            attempt = str(uuid.uuid4())
            now = utcnow()
            assert move_ti(session, ti.id, TI.SCHEDULED, expect=[TI.NONE], now=now)
            assert move_ti(
                session,
                ti.id,
                TI.QUEUED,
                expect=[TI.SCHEDULED],
                now=now,
                values={"attempt_id": attempt, "try_number": 1},
            )
            messages.append(
                RunMessage(
                    ti_id=ti.id,
                    attempt_id=attempt,
                    dag_id=ti.dag_id,
                    run_id=ti.run_id,
                    task_id=ti.task_id,
                    try_number=1,
                    queue=ti.queue,
                )
            )
    return messages


def stored_logs(factory: sessionmaker[Session], run_pk: int) -> dict[str, TaskLog]:
    with factory() as session:
        rows = session.execute(
            select(TaskInstance.task_id, TaskLog)
            .join(TaskLog, TaskLog.ti_id == TaskInstance.id)
            .where(TaskInstance.dag_run_id == run_pk)
        ).all()
    return {task_id: log for task_id, log in rows}


def test_tasks_running_in_threads_each_capture_only_their_own_output(
    threads_dag: tuple[sessionmaker[Session], int],
) -> None:
    # Given four tasks run at once in threads of this process, as the embedded worker does
    factory, run_pk = threads_dag
    ctx = WorkerContext(
        session_factory=factory,
        dags=DagCache(),
        waker=LocalWaker(),
        settings=Settings(heartbeat_interval=0.2),
        hostname="thread-host",
        pid=os.getpid(),
    )
    messages = queue(factory, run_pk)
    stdout_before = sys.stdout

    # When they run
    with ThreadPoolExecutor(max_workers=len(messages)) as pool:
        outcomes = dict(
            zip(
                [m.task_id for m in messages],
                pool.map(lambda m: run_task_instance(ctx, m), messages),
                strict=True,
            )
        )
    assert outcomes == {
        "py_a": Outcome.SUCCESS,
        "py_b": Outcome.SUCCESS,
        "py_c": Outcome.FAILED,
        "sh": Outcome.SUCCESS,
    }

    # Then each try's log holds its own lines, and no other task's
    logs = stored_logs(factory, run_pk)
    assert set(logs) == {"py_a", "py_b", "py_c", "sh"}
    for me in ("py_a", "py_b", "py_c"):
        log = logs[me]
        lines = log.content.split("\n")
        assert sum(f"[stdout] {me} out " in line for line in lines) == 20
        assert sum(f"[stderr] {me} err " in line for line in lines) == 20
        assert sum(f"[WARNING user.code] {me} log " in line for line in lines) == 20
        assert f"[stdout] {me} from a child thread" in log.content
        others = {"py_a", "py_b", "py_c"} - {me}
        assert not any(other in log.content for other in others), me
        assert (log.try_number, log.hostname, log.dropped_lines) == (1, "thread-host", 0)
        assert log.finished_at is not None and log.started_at <= log.finished_at
    assert "ValueError: py_c fails on purpose" in logs["py_c"].content
    assert "Traceback (most recent call last)" in logs["py_c"].content
    assert "[INFO sluice.tasks.shell] shell says sh" in logs["sh"].content
    assert "[WARNING sluice.tasks.shell] shell complains" in logs["sh"].content
    # the process's own streams still work, and nothing leaks into a later capture
    print("after the tasks")
    assert isinstance(sys.stdout.write("x\n"), int)
    assert getattr(sys.stdout, "wrapped", sys.stdout) is getattr(
        stdout_before, "wrapped", stdout_before
    )


def ti_of(factory: sessionmaker[Session], run_pk: int, task_id: str) -> int:
    """The id of `task_id`'s TI in the run `run_pk`."""
    with factory() as session:
        return int(
            session.scalars(
                select(TaskInstance.id).where(
                    TaskInstance.dag_run_id == run_pk, TaskInstance.task_id == task_id
                )
            ).one()
        )


def test_a_running_try_is_stored_before_it_ends(threads_dag) -> None:
    factory, run_pk = threads_dag
    ti_id = ti_of(factory, run_pk, "py_a")
    capture = TaskLogCapture(
        factory, ti_id=ti_id, try_number=1, attempt_id="x", hostname="h", flush_interval=0.05
    )
    seen: list[str] = []
    with capture:
        print("early line")
        logging.getLogger("user.code").error("an error")
        deadline = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=5)
        while dt.datetime.now(dt.UTC) < deadline and "an error" not in "".join(seen):
            threading.Event().wait(0.05)
            with factory() as session:
                row = session.get(TaskLog, (ti_id, 1))
                seen = [row.content] if row is not None and row.finished_at is None else seen
    assert "early line" in seen[0] and "[ERROR user.code] an error" in seen[0]
    final = capture.final_snapshot()  # the runner stores it with the try's result
    assert final is not None and final.finished_at is not None
    with transaction(factory) as session:
        save_task_log(session, final, now=dt.datetime.now(dt.UTC))
    with factory() as session:
        row = session.get(TaskLog, (ti_id, 1))
        assert row is not None and row.finished_at is not None


# -- a real prefork worker -----------------------------------------------------------------

WORKER_DAG = """
import logging

from sluice import DAG, ShellTask, task

with DAG("logged", schedule=None) as dag:
    @task(retries=1, retry_delay=0)
    def py(context):
        print(f"hello from try {context['try_number']}")
        logging.getLogger("user.code").warning("warned on try %s", context["try_number"])
        if context["try_number"] == 1:
            raise RuntimeError("first try fails")
        return "ok"

    sh = ShellTask("sh", command="echo shell line; echo shell error >&2")
    py >> sh
"""


def test_prefork_worker_stores_every_try(sluice: Sluice, capsys: pytest.CaptureFixture) -> None:
    # Given a scheduler and a prefork worker (separate processes)
    (sluice.dags_folder / "logged_dag.py").write_text(WORKER_DAG)
    sluice.scheduler()
    sluice.worker(concurrency=2)

    # When a run whose first task fails once, then succeeds, goes through
    run_id = sluice.trigger("logged", "--run-id", "l1")
    assert sluice.wait_run("logged", run_id, timeout=60) == "success"

    # Then each try's output is stored and `sluice tasks logs` prints it
    cli = Cli(Settings(database_url=sluice.database_url, broker_url=sluice.broker_url), role="test")
    parser = argparse.ArgumentParser()
    add_logs_parser(parser.add_subparsers())

    def logs(*argv: str) -> tuple[str, str]:
        args = parser.parse_args(["logs", "logged", "l1", *argv])
        assert args.func(cli, args) == 0
        captured = capsys.readouterr()
        return captured.out, captured.err

    first, header = logs("py", "--try", "1")
    assert "[stdout] hello from try 1" in first
    assert "[WARNING user.code] warned on try 1" in first
    assert "RuntimeError: first try fails" in first
    assert header.startswith("# logged l1 py try 1 on ")
    latest, _ = logs("py")
    assert "[stdout] hello from try 2" in latest and "first try fails" not in latest
    shell, _ = logs("sh")
    assert "[INFO sluice.tasks.shell] shell line" in shell
    assert "[WARNING sluice.tasks.shell] shell error" in shell
    with pytest.raises(CliError, match="has no try 3"):
        logs("py", "--try", "3")
    with pytest.raises(CliError, match="has no task 'nope'"):
        logs("nope")
    # the worker's own log still shows what the task printed
    assert "hello from try 2" in sluice.logs()
    cli.engine.dispose()


def test_standalone_threads_pool_captures_each_task(tmp_path: Path) -> None:
    # Given `sluice standalone` (SQLite, embedded broker, threads pool) and four tasks at once
    from tests.procs import standalone

    folder = tmp_path / "dags"
    folder.mkdir()
    (folder / "threads_dag.py").write_text(THREAD_DAG)
    db = tmp_path / "standalone.db"

    # When it runs one run of the DAG (py_c fails, so the run fails)
    done = standalone(
        tmp_path,
        folder,
        f"sqlite:///{db}",
        "--trigger",
        "threads",
        "-c",
        "4",
        SLUICE_HEARTBEAT_INTERVAL="0.5",
    )
    assert done.returncode == 1, done.stderr[-3000:]

    # Then every task's log is its own
    engine = make_engine(f"sqlite:///{db}")
    factory = make_session_factory(engine)
    with factory() as session:
        run_pk = session.scalars(select(TaskInstance.dag_run_id)).first()
    assert run_pk is not None
    logs = stored_logs(factory, run_pk)
    engine.dispose()
    assert set(logs) == {"py_a", "py_b", "py_c", "sh"}
    for me in ("py_a", "py_b", "py_c"):
        assert logs[me].content.count(f"[stdout] {me} out ") == 20
        assert not any(o in logs[me].content for o in {"py_a", "py_b", "py_c"} - {me})
    assert "shell says sh" in logs["sh"].content


# -- hostile output: a character at a time, a lot of it -----------------------------------


@pytest.mark.timeout(60)
def test_output_written_one_character_at_a_time_costs_what_it_writes() -> None:
    """A million single-character writes (progress dots, tqdm's '\\r' frames) end as one
    line: a partial line is kept as its pieces (joined again at every write, this took
    minutes)."""
    buffer = LogBuffer()
    for _ in range(1_000_000):
        buffer.write("stdout", ".")
    buffer.write("stdout", "\r100%\n")
    text, dropped, _ = buffer.snapshot()
    assert dropped == 0 and text.endswith("[stdout] " + "." * 1_000_000 + "\r100%")
    buffer.write("stdout", "x" * (buffer.max_bytes + 10))  # alone past the cap: cut, kept
    assert buffer.snapshot()[0].count("\n") == 0 and buffer.snapshot()[1] == 1


def test_a_running_try_s_log_grows_by_appends_and_its_mirror_is_capped(threads_dag) -> None:
    """While a try runs, each flush appends what is new (its statement carries the new
    lines, not the whole log), and the worker's own stdout gets the first 64 KiB of it
    and one line saying where the rest is; the stored log has everything."""
    import io

    from sluice.broker.worker.task_logs import MIRROR_BYTES_PER_TRY, ThreadAwareStream

    factory, run_pk = threads_dag
    ti_id = ti_of(factory, run_pk, "py_a")
    sizes: list[int] = []

    def sent(_conn: object, _cursor: object, statement: str, params: object, *_: object) -> None:
        if "task_log" in statement and ("INSERT" in statement or "UPDATE" in statement):
            sizes.append(len(repr(params)))

    engine = factory.kw["bind"]
    event.listen(engine, "before_cursor_execute", sent)
    worker_stdout = io.StringIO()
    stream = ThreadAwareStream(worker_stdout, "stdout")
    capture = TaskLogCapture(
        factory, ti_id=ti_id, try_number=1, attempt_id="x", hostname="h", flush_interval=3600
    )
    try:
        with capture:
            stream.write("first line\n" * 10_000)  # 110 KB
            assert capture.store(finished=False)  # the row's first write: all of it
            stream.write("second line\n")
            assert capture.store(finished=False)  # an append of one line
    finally:
        event.remove(engine, "before_cursor_execute", sent)
    with factory() as session:
        stored = session.get(TaskLog, (ti_id, 1))
        assert stored is not None
        assert stored.content == capture.buffer.snapshot()[0]
        assert stored.content.count("first line") == 10_000 and "second line" in stored.content
    assert len(sizes) == 2 and sizes[1] < 1_000 < sizes[0]
    mirrored = worker_stdout.getvalue()
    assert len(mirrored) < MIRROR_BYTES_PER_TRY + 200
    assert "the rest is in its task log only" in mirrored and "second line" not in mirrored


def test_a_worker_s_capture_takes_its_limits_from_the_settings(threads_dag) -> None:
    """SLUICE_TASK_LOG_MAX_BYTES and SLUICE_TASK_LOG_MIRROR_BYTES reach the capture a worker
    opens for a try (`capture_task_log`)."""
    import types
    from typing import cast

    from sluice.broker.worker.runner import WorkerContext
    from sluice.broker.worker.task_logs import capture_task_log
    from sluice.scheduler.core.settings import Settings

    factory, _run_pk = threads_dag
    settings = Settings.from_env(
        {"SLUICE_TASK_LOG_MAX_BYTES": "4096", "SLUICE_TASK_LOG_MIRROR_BYTES": "100"}
    )
    ctx = cast(
        WorkerContext,
        types.SimpleNamespace(session_factory=factory, hostname="h", settings=settings),
    )
    msg = types.SimpleNamespace(ti_id=1, attempt_id="x")
    capture = capture_task_log(ctx, msg, try_number=1)  # type: ignore[arg-type]
    assert capture.buffer.max_bytes == 4096
    mirrored = capture.mirrored("y" * 150)
    assert mirrored.startswith("y" * 100 + "\n") and "y" * 101 not in mirrored
    assert "SLUICE_TASK_LOG_MIRROR_BYTES" in mirrored
