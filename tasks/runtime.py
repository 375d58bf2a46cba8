"""Running one task in-process: calling it, enforcing its timeout, checking its result.

``run_task`` is what a worker (or a local backfill) calls. It raises whatever the task
raises: ``Skip`` to mark it skipped, ``TaskTimeout`` past ``execution_timeout``, anything
else is a failure. The caller decides the state; nothing here touches the database.

Timeouts work in every pool:

* main thread (Celery prefork child, solo pool, a local run): ``setitimer(ITIMER_REAL)`` and
  a SIGALRM handler raising ``TaskTimeout``; the previous handler and any running timer
  (e.g. pytest-timeout's) are restored afterwards.
* other threads (Celery threads pool): a watchdog ``threading.Timer`` raises ``TaskTimeout``
  in the task's thread with ``PyThreadState_SetAsyncExc``. The exception is delivered when
  the thread next runs Python bytecode, so a blocking C call (``time.sleep``, a socket read
  without a timeout) delays it until that call returns.

Shell tasks enforce the timeout themselves by killing the command's process group.
"""

from __future__ import annotations

import ctypes
import functools
import inspect
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from types import FrameType
from typing import Any, TypeVar

from sluice.tasks.errors import ResultError, TaskTimeout
from sluice.tasks.shell import run_shell, sluice_env
from sluice.tasks.task import ShellTask, Task

T = TypeVar("T")

#: Largest JSON-encoded task result stored, in bytes.
MAX_RESULT_BYTES = 65536


def run_task(task: Task, context: dict[str, Any]) -> Any:
    """Run ``task`` once with ``context``; return its value (a shell task: last stdout line)."""
    timeout = task.execution_timeout.total_seconds() if task.execution_timeout else None
    if isinstance(task, ShellTask):
        assert task.command is not None
        env = {**os.environ, **task.env, **sluice_env(context, task.dag.dag_id, task.task_id)}
        return run_shell(
            task.command,
            env=env,
            cwd=task.cwd,
            timeout=timeout,
            label=f"shell task '{task.task_id}'",
        )
    fn = task.python_callable
    if fn is None:
        raise TypeError(f"task '{task.task_id}' has no python_callable")
    call: Callable[[], Any] = (lambda: fn(context=context)) if _wants_context(fn) else fn
    if timeout is None:
        return call()
    return call_with_timeout(call, timeout, f"task '{task.task_id}' timed out after {timeout:g}s")


def call_with_timeout(call: Callable[[], T], timeout: float, what: str) -> T:
    """``call()``, raising ``TaskTimeout(what)`` inside it after ``timeout`` seconds: by
    SIGALRM in the main thread (a prefork or solo worker), by a watchdog in any other (a
    threads pool: it interrupts Python code, not a C call that blocks)."""
    if threading.current_thread() is threading.main_thread():
        return _call_with_alarm(call, timeout, what)
    return _call_with_watchdog(call, timeout, what)


def wants_context(task: Task) -> bool:
    """True if running ``task`` passes it the context (its callable takes ``context``)."""
    fn = None if isinstance(task, ShellTask) else task.python_callable
    return fn is not None and _wants_context(fn)


def _wants_context(fn: Callable[..., Any]) -> bool:
    """True if ``fn`` has a parameter named ``context`` that can be passed by keyword
    (asked for each run of a task: remembered per callable)."""
    try:
        return _wants_context_cached(fn)
    except TypeError:  # an unhashable callable
        return _reads_signature(fn)


def _reads_signature(fn: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    param = params.get("context")
    return param is not None and param.kind in (
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        inspect.Parameter.KEYWORD_ONLY,
    )


_wants_context_cached = functools.lru_cache(maxsize=4096)(_reads_signature)


def _call_with_alarm(call: Callable[[], T], timeout: float, what: str) -> T:
    """Main thread: SIGALRM after ``timeout`` raises ``TaskTimeout`` inside ``call``."""
    armed = True

    def on_alarm(signum: int, frame: FrameType | None) -> None:
        if armed:
            raise TaskTimeout(what)

    previous = signal.signal(signal.SIGALRM, on_alarm)
    started = time.monotonic()
    outer_delay, outer_interval = signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        return call()
    finally:
        armed = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer_delay > 0:  # someone else's timer was running: give it back what is left
            left = outer_delay - (time.monotonic() - started)
            signal.setitimer(signal.ITIMER_REAL, max(left, 0.001), outer_interval)


class _AsyncTimeout(TaskTimeout):
    """Raised into a thread by the watchdog (no message: it is created without arguments)."""


def _set_async_exc(thread_id: int, exc: type[BaseException] | None) -> int:
    set_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
    return int(set_exc(ctypes.c_ulong(thread_id), ctypes.py_object(exc) if exc else None))


def _call_with_watchdog(call: Callable[[], T], timeout: float, what: str) -> T:
    """Any thread: a watchdog raises ``TaskTimeout`` asynchronously in the calling thread.

    The lock makes "the call finished" and "the watchdog fired" mutually exclusive, and a
    pending exception that has not been delivered yet is cleared, so that no ``TaskTimeout``
    escapes into the caller's code after this function returns.
    """
    thread_id = threading.get_ident()
    lock = threading.Lock()
    state = {"done": False, "fired": False}

    def fire() -> None:
        with lock:
            if not state["done"]:
                state["fired"] = True
                _set_async_exc(thread_id, _AsyncTimeout)

    watchdog = threading.Timer(timeout, fire)
    watchdog.daemon = True
    watchdog.start()
    try:
        try:
            return call()
        finally:
            with lock:
                state["done"] = True
                if state["fired"]:
                    _set_async_exc(thread_id, None)  # clear it if not delivered yet
            watchdog.cancel()
            if state["fired"]:
                raise TaskTimeout(what)
    except _AsyncTimeout:
        raise TaskTimeout(what) from None


def check_result(value: Any, task_id: str | None = None) -> str | None:
    """JSON-encode a task's return value (None → None), or raise ``ResultError``."""
    if value is None:
        return None
    name = f"task '{task_id}'" if task_id else "the task"
    try:
        encoded = json.dumps(value, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError) as exc:
        raise ResultError(f"return value of {name} is not JSON-serialisable: {exc}") from None
    size = len(encoded.encode("utf-8"))
    if size > MAX_RESULT_BYTES:
        raise ResultError(
            f"return value of {name} is {size} bytes, over the {MAX_RESULT_BYTES}-byte cap"
        )
    return encoded


def branch_targets(task: Task, value: Any) -> set[str]:
    """The downstream task ids a branch task chose (a task id, a list of them, or None).

    Every id must be a direct downstream of ``task``; the other direct downstreams are the
    ones to skip. ``ValueError`` otherwise.
    """
    if value is None:
        chosen: set[str] = set()
    elif isinstance(value, str):
        chosen = {value}
    elif isinstance(value, Iterable) and not isinstance(value, Mapping | bytes):
        chosen = set(value)
    else:
        raise ValueError(f"branch task '{task.task_id}' returned {value!r}, not task id(s)")
    bad = sorted(str(t) for t in chosen - task.downstream_task_ids)
    if bad:
        raise ValueError(
            f"branch task '{task.task_id}' chose {', '.join(bad)}, which is not a direct "
            f"downstream (those are: {', '.join(sorted(task.downstream_task_ids)) or 'none'})"
        )
    return chosen
