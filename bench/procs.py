"""Subprocesses the bench starts itself: started in their own session, stopped by pid.

Stopping sends SIGTERM to the main pid only (a Celery worker then does a warm
shutdown of its pool children); a process still alive after the grace period,
and any pool child it left, is killed through the process group it leads, which
this module created.
"""

from __future__ import annotations

import compileall
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def compile_sources() -> None:
    """Sluice's modules compiled to bytecode before any process starts, as an installed
    wheel has them: where PYTHONDONTWRITEBYTECODE is set, each `sluice` process would
    otherwise compile them all again (0.1-0.3 s of CPU, counted in the figures)."""
    for folder in ("tasks", "scheduler", "broker", "sluice"):
        compileall.compile_dir(REPO_ROOT / folder, quiet=1)


class BenchError(RuntimeError):
    """A benchmark could not be carried out (a process died, a run did not finish …)."""


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of one process so far (/proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def sluice_argv() -> list[str]:
    """How to run `sluice`: the console script next to this interpreter, else `-m`."""
    script = Path(sys.executable).with_name("sluice")
    if script.exists():
        return [str(script)]
    found = shutil.which("sluice")
    return [found] if found else [sys.executable, "-m", "sluice.scheduler.cli.main"]


def clean_env(extra: Mapping[str, str]) -> dict[str, str]:
    """This process's environment without SLUICE_*/OTEL_* variables, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLUICE_", "OTEL_"))}
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p
    )
    env.update(extra)
    return env


class Proc:
    """One started subprocess with its log file."""

    def __init__(self, name: str, argv: Sequence[str], env: Mapping[str, str], log: Path) -> None:
        self.name = name
        self.log = log
        with open(log, "wb") as out:
            self.popen = subprocess.Popen(
                list(argv),
                env=dict(env),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                cwd=str(REPO_ROOT),
            )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def check_alive(self) -> None:
        if not self.alive():
            raise BenchError(f"{self.name} exited with {self.popen.returncode}:\n{self.tail()}")

    def wait_for_log(self, needle: str, timeout: float) -> None:
        """Wait until `needle` appears in the log (e.g. Celery's "ready.")."""
        wait_until(lambda: needle in self.tail(200_000), timeout, f"{self.name}: {needle!r}", self)

    def stop(self, grace: float = 20.0) -> None:
        """SIGTERM to the main pid; SIGKILL to its group if it is still there after `grace`."""
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.pid, signal.SIGKILL)
                self.popen.wait(timeout=5)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)  # pool children it may have left behind


def wait_until(
    check: Callable[[], object],
    timeout: float,
    what: str,
    proc: Proc | None = None,
    every: float = 0.05,
) -> None:
    """Poll `check` until truthy; BenchError at the deadline or if `proc` died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if proc is not None:
            proc.check_alive()
        time.sleep(every)
    tail = f"\n{proc.tail()}" if proc is not None else ""
    raise BenchError(f"timed out after {timeout:g}s waiting for {what}{tail}")


def run_cli(
    argv: Sequence[str], env: Mapping[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    """Run a command to its end; BenchError on a non-zero exit."""
    done = subprocess.run(
        list(argv),
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=str(REPO_ROOT),
        stdin=subprocess.DEVNULL,
    )
    if done.returncode != 0:
        raise BenchError(f"{' '.join(argv)} exited with {done.returncode}:\n{done.stderr[-3000:]}")
    return done
