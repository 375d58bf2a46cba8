"""Running a shell task's command.

Contract: the command runs with ``/bin/sh -c`` in its own process group (session), with
``os.environ`` + the task's ``env`` + ``SLUICE_*`` variables (DAG_ID, RUN_ID, TASK_ID,
TRY_NUMBER, LOGICAL_DATE). Each stdout line is logged at INFO and each stderr line at
WARNING on the ``sluice.tasks.shell`` logger. Exit 0 → the last stdout line (or None if there was
no output); non-zero → ``ShellCommandError`` naming the code and the last stderr line; past
the timeout the whole process group is killed and ``TaskTimeout`` raised.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from datetime import datetime
from typing import IO, Any

from sluice.tasks.errors import ShellCommandError, TaskStopped, TaskTimeout

log = logging.getLogger(__name__)

#: Seconds between SIGTERM and SIGKILL to the process group on timeout.
KILL_GRACE = 2.0


def sluice_env(context: Mapping[str, Any], dag_id: str, task_id: str) -> dict[str, str]:
    """The ``SLUICE_*`` variables for ``context`` (falling back to the task's own ids)."""
    logical = context.get("logical_date")
    if isinstance(logical, datetime):
        logical = logical.isoformat()
    return {
        "SLUICE_DAG_ID": str(context.get("dag_id") or dag_id),
        "SLUICE_RUN_ID": str(context.get("run_id") or ""),
        "SLUICE_TASK_ID": str(context.get("task_id") or task_id),
        "SLUICE_TRY_NUMBER": str(context.get("try_number") or ""),
        "SLUICE_LOGICAL_DATE": str(logical or ""),
    }


class _Reader(threading.Thread):
    """Logs every line of one pipe and remembers the last one."""

    def __init__(self, stream: IO[bytes], level: int, name: str) -> None:
        super().__init__(name=f"sluice-shell-{name}", daemon=True)
        self.stream = stream
        self.level = level
        self.last: str | None = None

    def run(self) -> None:
        with self.stream:
            for raw in self.stream:
                line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                self.last = line
                log.log(self.level, "%s", line)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    for sig, wait in ((signal.SIGTERM, KILL_GRACE), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


#: Seconds between two looks at a shell task's stop while its command runs.
STOP_POLL = 0.1


def _wait(proc: subprocess.Popen[bytes], timeout: float | None, stop: Any) -> int:
    """``proc.wait(timeout)``, raising TaskStopped once ``stop`` has a reason."""
    if stop is None:
        return proc.wait(timeout)
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        if stop.reason is not None:
            raise stop.error()
        step = STOP_POLL if deadline is None else min(STOP_POLL, deadline - time.monotonic())
        try:
            return proc.wait(max(step, 0.0))
        except subprocess.TimeoutExpired:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(proc.args, timeout or 0.0) from None


def run_shell(
    command: str,
    *,
    env: Mapping[str, str],
    cwd: str | None = None,
    timeout: float | None = None,
    label: str = "shell command",
    stop: Any = None,
) -> str | None:
    """Run ``command``; return its last stdout line. See the module docstring. ``stop``
    (a ``runtime.Stop``) ends it from another thread: its process group is killed and
    ``TaskStopped`` raised (the wait looks at it every ``STOP_POLL`` seconds)."""
    proc = subprocess.Popen(
        ["/bin/sh", "-c", command],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(env),
        cwd=cwd,
        start_new_session=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    out = _Reader(proc.stdout, logging.INFO, "stdout")
    err = _Reader(proc.stderr, logging.WARNING, "stderr")
    out.start()
    err.start()
    try:
        code = _wait(proc, timeout, stop)
    except TaskStopped:
        _kill_group(proc)
        raise
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        raise TaskTimeout(f"{label} timed out after {timeout:g}s; process group killed") from None
    except BaseException:
        _kill_group(proc)
        raise
    finally:
        # A background child may keep the pipes open: do not wait for it forever.
        out.join(5.0)
        err.join(5.0)
    if code != 0:
        tail = err.last or ""
        how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
        raise ShellCommandError(f"{label} {how}" + (f": {tail}" if tail else ""), code, tail)
    return out.last
