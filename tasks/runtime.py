"""Running one task in-process: calling it, enforcing its timeout, checking its result.

``run_task`` is what a worker (or a local backfill) calls. It raises whatever the task
raises: ``Skip`` to mark it skipped, ``TaskTimeout`` past ``execution_timeout``, anything
else is a failure. The caller decides the state; nothing here touches the database.

``TaskTimeout`` derives from ``BaseException`` (as Airflow's ``AirflowTaskTimeout``): a
task's ``except Exception`` cannot swallow it. A body that swallows it all the same (a
bare ``except:``) is ended by the worker after a grace (``broker.worker.time_limits``).

Timeouts work in every pool:

* main thread (Celery prefork child, solo pool, a local run): ``setitimer(ITIMER_REAL)`` and
  a SIGALRM handler raising ``TaskTimeout``; the previous handler and any running timer
  (e.g. pytest-timeout's) are restored afterwards.
* other threads (Celery threads pool): a watchdog ``threading.Timer`` raises ``TaskTimeout``
  in the task's thread with ``PyThreadState_SetAsyncExc``. The exception is delivered when
  the thread next runs Python bytecode, so a blocking C call (``time.sleep``, a socket read
  without a timeout) delays it until that call returns.

Shell tasks enforce the timeout themselves by killing the command's process group.

A ``Stop`` ends a running call from another thread (a worker's heartbeat that found the try
no longer running: cancelled, marked, timed out, swept). It raises ``TaskStopped``, which
derives from ``BaseException`` so that a task's ``except Exception`` cannot swallow it:
in the main thread by sending it SIGALRM (a blocking ``time.sleep`` is interrupted at
once), in any other thread as an asynchronous exception (delivered at the next bytecode:
a call blocked in C finishes first, and not one more line of the task runs after it); a
shell task's process group is killed.
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

from sluice.tasks.arguments import resolve
from sluice.tasks.errors import ResultError, TaskStopped, TaskTimeout
from sluice.tasks.mapping import index_kwargs
from sluice.tasks.shell import run_shell, sluice_env
from sluice.tasks.task import ShellTask, Task

T = TypeVar("T")

#: Largest JSON-encoded task result stored, in bytes.
MAX_RESULT_BYTES = 65536


class Stop:
    """Stops one running call from another thread; `stop` is safe to call at any time
    (before, during or after the call) and acts at most once. Its lock makes "the call
    ended" and "the stop was sent" mutually exclusive: nothing is raised after the call."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self._lock = threading.Lock()
        self._thread_id: int | None = None
        self._main = False
        self._sent = False

    def stop(self, reason: str) -> None:
        with self._lock:
            if self.reason is not None:
                return
            self.reason = reason
            if self._thread_id is not None:
                self._send()

    def _send(self) -> None:
        assert self._thread_id is not None
        self._sent = True
        if self._main:
            signal.pthread_kill(self._thread_id, signal.SIGALRM)
        else:
            _set_async_exc(self._thread_id, _AsyncStopped)

    def enter(self, *, main: bool) -> None:
        """The call starts in this thread; raises TaskStopped if a stop came first."""
        with self._lock:
            if self.reason is not None:
                raise TaskStopped(self.reason)
            self._thread_id, self._main = threading.get_ident(), main

    def leave(self) -> bool:
        """The call ended; whether a stop was sent to it (a pending one is cleared)."""
        with self._lock:
            sent, self._thread_id = self._sent, None
            if sent and not self._main:
                _set_async_exc(threading.get_ident(), None)
            return sent

    def error(self) -> TaskStopped:
        return TaskStopped(self.reason or "stopped")


def run_task(task: Task, context: dict[str, Any], stop: Stop | None = None) -> Any:
    """Run ``task`` once with ``context``; return its value (a shell task: last stdout line).
    ``stop``, if given, can end the call from another thread (``TaskStopped``)."""
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
            stop=stop,
        )
    fn = task.python_callable
    if fn is None:
        raise TypeError(f"task '{task.task_id}' has no python_callable")
    call = _bound(task, fn, context)
    if timeout is None and stop is None:
        return call()
    what = f"task '{task.task_id}' timed out after {timeout:g}s" if timeout else ""
    return call_with_timeout(call, timeout, what, stop)


def _bound(task: Task, fn: Callable[..., Any], context: dict[str, Any]) -> Callable[[], Any]:
    """`fn` called with the task's bound arguments (upstream outputs resolved from
    `context["upstream"]`) and, if it takes it, `context`."""
    extra = {"context": context} if _wants_context(fn) else {}
    if task.bound_call is None:
        return (lambda: fn(**extra)) if extra else fn
    upstream = context.get("upstream") or {}
    args = resolve(list(task.bound_call[0]), upstream, task.task_id)
    kwargs = resolve(task.bound_call[1], upstream, task.task_id)
    if task.map is not None:
        index = context.get("map_index")
        if index is None:
            raise LookupError(f"task '{task.task_id}' is mapped: it runs as one of its indexes")
        kwargs.update(index_kwargs(task.map, upstream, int(index), task.per_index))
    return lambda: fn(*args, **kwargs, **extra)


def call_with_timeout(
    call: Callable[[], T], timeout: float | None, what: str, stop: Stop | None = None
) -> T:
    """``call()``, raising ``TaskTimeout(what)`` inside it after ``timeout`` seconds (None:
    never) and ``TaskStopped`` when ``stop`` is used: by SIGALRM in the main thread (a
    prefork or solo worker), by a watchdog in any other (a threads pool: it interrupts
    Python code, not a C call that blocks)."""
    if threading.current_thread() is threading.main_thread():
        return _call_with_alarm(call, timeout, what, stop)
    return _call_with_watchdog(call, timeout, what, stop)


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


def _call_with_alarm(
    call: Callable[[], T], timeout: float | None, what: str, stop: Stop | None
) -> T:
    """Main thread: SIGALRM after ``timeout`` raises ``TaskTimeout`` inside ``call``; a
    SIGALRM sent by ``stop`` raises ``TaskStopped``."""
    armed = True

    def on_alarm(signum: int, frame: FrameType | None) -> None:
        if not armed:
            return
        if stop is not None and stop.reason is not None:
            raise stop.error()
        if timeout is not None:
            raise TaskTimeout(what)

    previous = signal.signal(signal.SIGALRM, on_alarm)
    started = time.monotonic()
    outer_delay, outer_interval = signal.getitimer(signal.ITIMER_REAL)
    if timeout is not None:
        outer_delay, outer_interval = signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        if stop is not None:
            stop.enter(main=True)
        try:
            return call()
        finally:
            if stop is not None:
                stop.leave()
    finally:
        armed = False
        if timeout is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)
        # a SIGALRM still in flight must not meet the default action (end the process)
        signal.signal(signal.SIGALRM, previous if callable(previous) else _inert)
        if timeout is not None and outer_delay > 0:  # give back what is left of a timer
            left = outer_delay - (time.monotonic() - started)
            signal.setitimer(signal.ITIMER_REAL, max(left, 0.001), outer_interval)


def _inert(signum: int, frame: FrameType | None) -> None:
    """SIGALRM outside a task: ignored (it can only be a late stop or timeout)."""


class _AsyncTimeout(TaskTimeout):
    """Raised into a thread by the watchdog (no message: it is created without arguments)."""


def _set_async_exc(thread_id: int, exc: type[BaseException] | None) -> int:
    set_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
    return int(set_exc(ctypes.c_ulong(thread_id), ctypes.py_object(exc) if exc else None))


class _AsyncStopped(TaskStopped):
    """Raised into a thread by `Stop.stop` (created without arguments)."""


def _call_with_watchdog(
    call: Callable[[], T], timeout: float | None, what: str, stop: Stop | None
) -> T:
    """Any thread: a watchdog raises ``TaskTimeout`` asynchronously in the calling thread,
    and ``stop`` raises ``TaskStopped`` the same way.

    The locks make "the call finished" and "the watchdog (or the stop) fired" mutually
    exclusive, and a pending exception that has not been delivered yet is cleared, so that
    neither escapes into the caller's code after this function returns.
    """
    thread_id = threading.get_ident()
    lock = threading.Lock()
    state = {"done": False, "fired": False}

    def fire() -> None:
        with lock:
            if not state["done"]:
                state["fired"] = True
                _set_async_exc(thread_id, _AsyncTimeout)

    watchdog = threading.Timer(timeout, fire) if timeout is not None else None
    if watchdog is not None:
        watchdog.daemon = True
        watchdog.start()
    try:
        try:
            if stop is not None:
                stop.enter(main=False)
            try:
                return call()
            finally:
                stopped = stop is not None and stop.leave()
                with lock:
                    state["done"] = True
                    if state["fired"]:
                        _set_async_exc(thread_id, None)  # clear it if not delivered yet
                if watchdog is not None:
                    watchdog.cancel()
                if stopped:
                    assert stop is not None
                    raise stop.error()
                if state["fired"]:
                    raise TaskTimeout(what)
        except _AsyncStopped:
            assert stop is not None
            raise stop.error() from None
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
