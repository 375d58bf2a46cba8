"""run_task: context passing, Skip, timeouts in the main and other threads, shell tasks."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from sluice import (
    DAG,
    ResultError,
    ShellCommandError,
    ShellTask,
    Skip,
    Task,
    TaskStopped,
    TaskTimeout,
)
from sluice.tasks.runtime import Stop, branch_targets, check_result, run_task

CONTEXT = {
    "dag_id": "rt",
    "run_id": "manual__x",
    "task_id": "t",
    "try_number": 2,
    "logical_date": datetime(2026, 1, 2, tzinfo=UTC),
}


def make(fn: Callable[..., Any], **options: Any) -> Task:
    with DAG("rt"):
        return Task("t", python_callable=fn, **options)


def shell(command: str, **options: Any) -> ShellTask:
    with DAG("rt"):
        return ShellTask("sh", command, **options)


def busy(seconds: float) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.01)
    return "finished"


def test_context_is_passed_only_to_a_context_parameter() -> None:
    assert run_task(make(lambda context: context["run_id"]), CONTEXT) == "manual__x"
    assert run_task(make(lambda *, context: context["try_number"]), CONTEXT) == 2
    assert run_task(make(lambda: "none"), CONTEXT) == "none"
    assert run_task(make(lambda **kwargs: kwargs), CONTEXT) == {}


def test_exceptions_propagate() -> None:
    def skipper() -> None:
        raise Skip("nothing to do")

    with pytest.raises(Skip, match="nothing to do"):
        run_task(make(skipper), CONTEXT)
    with pytest.raises(ZeroDivisionError):
        run_task(make(lambda: 1 / 0), CONTEXT)


def test_timeout_in_main_thread_restores_previous_alarm() -> None:
    assert threading.current_thread() is threading.main_thread()
    handler_before = signal.getsignal(signal.SIGALRM)
    outer_before, _ = signal.getitimer(signal.ITIMER_REAL)  # pytest-timeout's, if any
    task = make(lambda: busy(5), execution_timeout=timedelta(seconds=0.2))
    started = time.monotonic()
    with pytest.raises(TaskTimeout, match=r"task 't' timed out after 0.2s"):
        run_task(task, CONTEXT)
    assert time.monotonic() - started < 2
    assert signal.getsignal(signal.SIGALRM) is handler_before
    outer_after, _ = signal.getitimer(signal.ITIMER_REAL)
    assert (outer_after > 0) == (outer_before > 0)
    fast = make(lambda: "ok", execution_timeout=timedelta(seconds=5))
    assert run_task(fast, CONTEXT) == "ok"


def _in_thread(fn: Callable[[], Any]) -> Any:
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - hand it to the test thread
            box["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(10)
    assert not thread.is_alive()
    if "error" in box:
        raise box["error"]
    return box["value"]


def test_timeout_in_a_worker_thread() -> None:
    task = make(lambda: busy(5), execution_timeout=timedelta(seconds=0.2))

    def run_then_keep_going() -> str:
        started = time.monotonic()
        try:
            run_task(task, CONTEXT)
        except TaskTimeout as exc:
            assert "timed out after 0.2s" in str(exc)
            assert time.monotonic() - started < 2
        else:
            raise AssertionError("no timeout")
        return busy(0.3)  # no stray exception arrives later

    assert _in_thread(run_then_keep_going) == "finished"


def swallows_exceptions(seconds: float) -> str:
    """What a careless task does: every `Exception` caught, in a loop."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            time.sleep(0.01)
        except Exception:  # noqa: BLE001, S112 - the finding's body
            continue
    return "kept going"


def test_a_timeout_is_not_swallowed_by_the_tasks_except_exception() -> None:
    """Issue 39, 4.3: `TaskTimeout` derives from `BaseException`, as Airflow's
    `AirflowTaskTimeout`: a body that catches `Exception` in a loop ends at its timeout
    all the same, in the main thread (SIGALRM) and in a pool thread (the watchdog)."""
    assert issubclass(TaskTimeout, BaseException) and not issubclass(TaskTimeout, Exception)
    task = make(lambda: swallows_exceptions(5), execution_timeout=timedelta(seconds=0.2))
    started = time.monotonic()
    with pytest.raises(TaskTimeout, match=r"task 't' timed out after 0.2s"):
        run_task(task, CONTEXT)
    assert time.monotonic() - started < 2

    def in_a_thread() -> str:
        try:
            run_task(task, CONTEXT)
        except TaskTimeout:
            return "timed out"
        return "not timed out"

    started = time.monotonic()
    assert _in_thread(in_a_thread) == "timed out"
    assert time.monotonic() - started < 2


def test_fast_task_in_a_worker_thread_is_not_interrupted_later() -> None:
    task = make(lambda: "quick", execution_timeout=timedelta(seconds=0.1))
    assert _in_thread(lambda: (run_task(task, CONTEXT), busy(0.3))) == ("quick", "finished")


def test_shell_success_env_and_logging(caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    task = shell(
        'echo "$SLUICE_DAG_ID $SLUICE_RUN_ID $SLUICE_TASK_ID $SLUICE_TRY_NUMBER"; '
        'echo "$SLUICE_LOGICAL_DATE $MY_VAR $(pwd)"; echo warn >&2',
        env={"MY_VAR": "mine"},
        cwd=str(tmp_path),
    )
    with caplog.at_level(logging.INFO, logger="sluice.tasks.shell"):
        result = run_task(task, CONTEXT)
    assert result == f"2026-01-02T00:00:00+00:00 mine {tmp_path}"
    records = [
        (r.levelno, r.getMessage()) for r in caplog.records if r.name == "sluice.tasks.shell"
    ]
    assert (logging.INFO, "rt manual__x t 2") in records
    assert (logging.WARNING, "warn") in records
    assert run_task(shell("true"), CONTEXT) is None


def test_shell_failure_names_code_and_last_stderr_line() -> None:
    task = shell("echo first >&2; echo 'disk full' >&2; exit 3")
    with pytest.raises(ShellCommandError, match="exited with code 3: disk full") as info:
        run_task(task, CONTEXT)
    assert info.value.returncode == 3 and info.value.stderr_tail == "disk full"


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] == "Z"  # a zombie is dead
    except FileNotFoundError:
        return True


def test_shell_timeout_kills_the_process_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    task = shell(f"sleep 30 & echo $! > {pid_file}; wait", execution_timeout=timedelta(seconds=0.3))
    started = time.monotonic()
    with pytest.raises(TaskTimeout, match="timed out after 0.3s"):
        run_task(task, CONTEXT)
    assert time.monotonic() - started < 5
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 2
    while not _gone(child) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _gone(child)
    with pytest.raises(ProcessLookupError):
        os.killpg(child, 0)


def test_check_result() -> None:
    assert check_result(None) is None
    assert check_result({"rows": 3}) == '{"rows":3}'
    with pytest.raises(ResultError, match="task 'x' is not JSON-serialisable"):
        check_result({1, 2}, "x")
    with pytest.raises(ResultError, match="not JSON-serialisable"):
        check_result(float("nan"), "x")
    assert check_result("a" * 65534) is not None  # 65536 bytes with the quotes
    with pytest.raises(ResultError, match=r"is 70002 bytes, over the 65536-byte cap"):
        check_result("a" * 70000, "x")


def test_branch_targets() -> None:
    with DAG("br"):
        chooser = Task("choose", python_callable=lambda: "a", is_branch=True)
        a = Task("a", python_callable=lambda: None)
        b = Task("b", python_callable=lambda: None)
        chooser >> [a, b]  # noqa: B018
    assert branch_targets(chooser, "a") == {"a"}
    assert branch_targets(chooser, ["a", "b"]) == {"a", "b"}
    assert branch_targets(chooser, None) == set()
    with pytest.raises(ValueError, match="not a direct downstream"):
        branch_targets(chooser, "zzz")


def stop_after(stop: Stop, seconds: float) -> None:
    threading.Timer(seconds, stop.stop, args=("cancelled",)).start()


def test_a_stop_interrupts_a_sleep_in_the_main_thread() -> None:
    # a prefork child or a solo worker: SIGALRM interrupts the C sleep itself
    stop = Stop()
    stop_after(stop, 0.2)
    started = time.monotonic()
    with pytest.raises(TaskStopped, match="cancelled"):
        run_task(make(lambda: time.sleep(30)), CONTEXT, stop)
    assert time.monotonic() - started < 5
    assert signal.getsignal(signal.SIGALRM) not in (signal.SIG_DFL, None)  # a late one is inert


def test_a_stop_is_not_swallowed_by_the_tasks_except_exception() -> None:
    def stubborn() -> str:
        for _ in range(300):
            try:
                time.sleep(0.01)
            except Exception:  # noqa: BLE001, S112 - what a careless task does
                continue
        return "kept going"

    stop = Stop()
    stop_after(stop, 0.1)
    with pytest.raises(TaskStopped):
        run_task(make(stubborn), CONTEXT, stop)


def test_a_stop_in_a_worker_thread_ends_the_task_at_its_next_line() -> None:
    stop = Stop()
    stop_after(stop, 0.2)
    started = time.monotonic()

    def run_then_keep_going() -> str:
        try:
            run_task(make(lambda: busy(30)), CONTEXT, stop)
        except TaskStopped:
            assert time.monotonic() - started < 5
        else:
            raise AssertionError("not stopped")
        return busy(0.3)  # nothing arrives later

    assert _in_thread(run_then_keep_going) == "finished"


def test_a_stop_before_or_after_the_call() -> None:
    early = Stop()
    early.stop("cancelled first")
    with pytest.raises(TaskStopped, match="cancelled first"):
        run_task(make(lambda: "never"), CONTEXT, early)
    late = Stop()
    assert run_task(make(lambda: "done"), CONTEXT, late) == "done"
    late.stop("too late")  # the call has ended: nothing is raised anywhere
    assert _in_thread(lambda: busy(0.2)) == "finished"
    assert busy(0.2) == "finished"


def test_a_stop_kills_a_shell_tasks_process_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    stop = Stop()
    stop_after(stop, 0.3)
    with pytest.raises(TaskStopped):
        run_task(shell(f"sleep 30 & echo $! > {pid_file}; wait"), CONTEXT, stop)
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while not _gone(child) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _gone(child)
