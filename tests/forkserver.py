"""A fork server for the tests' `sluice` processes.

Each pytest process runs one server (`python -m tests.forkserver FD`), which imports
Sluice and its libraries once and forks every `python -m sluice.scheduler.cli.main ARGS`
a test starts through `tests.procs.Sluice`. The child is a real process of its own: its
own session, pid and process group, the test's environment, working directory and
standard streams, the command's own `main`, and a normal interpreter exit (atexit,
flushes). What it does not pay is the import: about 1.2 s of CPU a CLI call and 1.6 s a
daemon here, on a suite whose wall time is its CPU (hundreds of such processes).

Why a server and not `os.fork` in pytest: pytest's process runs threads (proxies, a
served API), and a fork copies their locks in whatever state they are in. The server
is single-threaded: it checks that no thread runs after its imports, and its loop
waits on its control socket and on the children's pidfds only.

Protocol: the control socket is a SOCK_SEQPACKET pair. A request is one message, JSON
(`args`, `env`, `cwd`), with four descriptors: the process's own stream socket, then
its stdin, stdout and stderr. On that socket the server writes `{"pid": N}`, then
`{"exit": CODE, "cpu": SECONDS}` (negative: the signal) once it has reaped the child
(`wait4`). The server exits
when the control socket closes (its pytest process ended).

A command whose environment would start Python differently (PYTHON*, LANG, LC_*) than
the server's is not forked: `fork_compatible` says so and the caller runs it with
`subprocess` as before. `SLUICE_TESTS_FORKSERVER=0` turns the server off.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import io
import json
import locale
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PRELOAD = (
    "sluice.scheduler.cli.main",
    "sluice.scheduler.cli.services",
    "sluice.scheduler.cli.dags",
    "sluice.scheduler.cli.tasks_cmd",
    "sluice.scheduler.cli.events_cmd",
    "sluice.scheduler.cli.assets_cmd",
    "sluice.scheduler.cli.concurrency_cmd",
    "sluice.scheduler.cli.users_cmd",
    "sluice.scheduler.cli.secrets_cmd",
    "sluice.scheduler.cli.standalone",
    "sluice.scheduler.cli.backfill",
    "sluice.scheduler.cli.status",
    "sluice.scheduler.cli.api_cmd",
    "sluice.broker.app",
    "sluice.broker.publisher",
    "sluice.broker.wakeup",
    "sluice.broker.worker.process",
    "sluice.scheduler.jobs.scheduler_job",
    "sluice.scheduler.jobs.triggerer",
    "sluice.scheduler.jobs.metrics",
    "sluice.scheduler.core.tracing",
    "sluice.scheduler.jobs.backfill_job",
    "sluice.scheduler.control.workers",
    "sluice.scheduler.core.migrate",
    "celery.apps.worker",
    "celery.worker",
    "celery.worker.consumer",
    "celery.concurrency.prefork",
    "celery.events",
    "celery.app.amqp",
    "celery.app.control",
    "celery.app.events",
    "celery.app.log",
    "celery.app.routes",
    "celery.fixups.django",
    "celery.worker.autoscale",
    "celery.worker.components",
    "celery.worker.consumer.delayed_delivery",
    "celery.worker.strategy",
    "billiard.pool",
    "billiard.popen_fork",
    "billiard.sharedctypes",
    "billiard.synchronize",
    "kombu.transport.redis",
    "kombu.transport.pyamqp",
    "kombu.pidbox",
    "psycopg",
    "sqlalchemy.dialects.postgresql.psycopg",
    "sqlalchemy.dialects.sqlite",
    "alembic.command",
    "alembic.config",
    "alembic.script",
    "alembic.runtime.migration",
    "cffi",
    "encodings.idna",
)
"""What the server imports once: the CLI, every command's module, what the daemons
import when they start and what the commands import on their first use (the database
driver, Celery's app parts, pool and transports, Alembic, the IDNA codec of host names).
The list is what a forked scheduler, worker and CLI call were seen importing."""

STARTUP_PREFIXES = ("PYTHON", "LC_")
STARTUP_NAMES = frozenset({"LANG", "LANGUAGE"})
"""Environment variables read when Python starts (its path, flags, encodings): a command
whose values differ from the server's is not forked. PYTHONUNBUFFERED is the exception:
the child sets its streams up as it says (`_standard_streams`)."""

REPO_ROOT = Path(__file__).resolve().parents[1]
MAX_REQUEST = 1 << 20


# -- the server ----------------------------------------------------------------------------


@dataclass
class Request:
    """What a forked child runs: `python -m sluice.scheduler.cli.main ARGS` in `cwd`,
    with `env` and the three standard descriptors."""

    args: list[str]
    env: dict[str, str]
    cwd: str
    stdio: list[int]


def serve(control: socket.socket) -> Request | None:
    """Fork a child per request until the control socket closes (then None); returns
    the request in the child (and only there)."""
    selector = selectors.DefaultSelector()
    selector.register(control, selectors.EVENT_READ, None)
    children: dict[int, tuple[int, socket.socket]] = {}  # pidfd: (pid, its socket)
    while True:
        for key, _ in selector.select():
            if key.data is not None:
                _reap(selector, children, key.fd)
                continue
            message, fds, _flags, _addr = socket.recv_fds(control, MAX_REQUEST, 4)
            if not message:
                return None
            body = json.loads(message)
            conn = socket.socket(fileno=fds[0])
            request = Request(body["args"], body["env"], body["cwd"], list(fds[1:]))
            pid = os.fork()
            if pid == 0:
                selector.close()
                control.close()
                for pidfd, (_pid, other) in children.items():
                    os.close(pidfd)
                    other.close()
                conn.close()
                return request
            for fd in request.stdio:
                os.close(fd)
            pidfd = os.pidfd_open(pid)
            children[pidfd] = (pid, conn)
            selector.register(pidfd, selectors.EVENT_READ, pid)
            _say(conn, {"pid": pid})


def _reap(
    selector: selectors.BaseSelector, children: dict[int, tuple[int, socket.socket]], pidfd: int
) -> None:
    pid, conn = children.pop(pidfd)
    selector.unregister(pidfd)
    os.close(pidfd)
    _pid, status, usage = os.wait4(pid, 0)
    cpu = usage.ru_utime + usage.ru_stime
    _say(conn, {"exit": os.waitstatus_to_exitcode(status), "cpu": cpu})
    conn.close()


def _say(conn: socket.socket, message: dict[str, float]) -> None:
    with contextlib.suppress(OSError):  # the test gave up on the process
        conn.sendall(json.dumps(message).encode() + b"\n")


def become(request: Request) -> None:
    """In the forked child: the session, streams, directory, environment and argv
    `python -m sluice.scheduler.cli.main ARGS` would have, started by `Popen`."""
    os.setsid()
    for target, fd in enumerate(request.stdio):
        os.dup2(fd, target)
    for fd in request.stdio:
        if fd > 2:
            os.close(fd)
    os.chdir(request.cwd)
    os.environ.clear()
    os.environ.update(request.env)
    time.tzset()
    _standard_streams(unbuffered=bool(request.env.get("PYTHONUNBUFFERED")))
    module = importlib.import_module("sluice.scheduler.cli.main")
    sys.argv = [str(module.__file__), *request.args]
    sys.path[0] = request.cwd  # what `-m` puts first


def _standard_streams(unbuffered: bool) -> None:
    """`sys.stdin`, `sys.stdout` and `sys.stderr` on the new descriptors, buffered as
    Python buffers them at its start with this environment: written through under
    PYTHONUNBUFFERED, else stdout line-buffered on a terminal and block-buffered
    elsewhere, stderr line-buffered (the server's own were made for its environment)."""
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        old: Any = getattr(sys, name)
        writes = fd > 0
        mode, buffering = ("wb", 0 if unbuffered else -1) if writes else ("rb", -1)
        binary = open(fd, mode, buffering=buffering, closefd=False)  # noqa: SIM115
        stream = io.TextIOWrapper(
            binary,
            encoding=old.encoding,
            errors=old.errors,
            line_buffering=not unbuffered and (fd == 2 or (fd == 1 and os.isatty(fd))),
            write_through=unbuffered and writes,
        )
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def main() -> None:
    control = socket.socket(fileno=int(sys.argv[1]))
    for name in PRELOAD:
        importlib.import_module(name)
    # What a worker does at its start (`sluice.broker.worker.task`): cffi builds its C
    # parser once in a process; the forked workers inherit it built.
    importlib.import_module("cffi").FFI().cdef("int prctl (int __option, ...);")
    # SQLAlchemy configures the ORM's mappers at their first use in a process: 26 ms of
    # every forked command's CPU, which the server spends once.
    importlib.import_module("sqlalchemy.orm").configure_mappers()
    gc.freeze()  # the children's collections skip what the server made (no copy-on-write)
    if threading.active_count() != 1:
        raise SystemExit(f"forkserver: {threading.active_count()} threads after the imports")
    request = serve(control)
    if request is None:
        return
    become(request)
    from sluice.scheduler.cli.main import main as sluice_main

    sys.exit(sluice_main(request.args))


# -- the tests' side -----------------------------------------------------------------------


def enabled() -> bool:
    return os.environ.get("SLUICE_TESTS_FORKSERVER", "1") != "0"


def _startup_env(env: dict[str, str]) -> dict[str, str]:
    return {
        k: v
        for k, v in env.items()
        if (k.startswith(STARTUP_PREFIXES) or k in STARTUP_NAMES) and k != "PYTHONUNBUFFERED"
    }


class Server:
    """This pytest process's fork server, started at its first request."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._control: socket.socket | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("SLUICE_", "OTEL_"))}
        self._startup = _startup_env(self.env)

    def fork_compatible(self, env: dict[str, str]) -> bool:
        """Whether a command with `env` starts Python as the server did."""
        return enabled() and _startup_env(env) == self._startup

    def _start(self) -> socket.socket:
        if self._control is None:
            mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "tests.forkserver", str(theirs.fileno())],
                pass_fds=[theirs.fileno()],
                env=self.env,
                cwd=REPO_ROOT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
            theirs.close()
            self._control = mine
        return self._control

    def spawn(
        self, args: list[str], env: dict[str, str], cwd: Path | str | None, stdio: list[int]
    ) -> Forked:
        """Fork `python -m sluice.scheduler.cli.main ARGS` in `cwd` (this process's when
        None, as `Popen` has it) with these streams."""
        mine, theirs = socket.socketpair()
        where = str(Path.cwd() if cwd is None else cwd)
        body = json.dumps({"args": args, "env": env, "cwd": where}).encode()
        try:
            with self._lock:
                socket.send_fds(self._start(), [body], [theirs.fileno(), *stdio])
        finally:
            theirs.close()
        return Forked(args, mine)

    def stop(self) -> None:
        with self._lock:
            if self._control is not None:
                self._control.close()
                self._control = None
            if self._proc is not None:
                try:
                    self._proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(self._proc.pid, signal.SIGKILL)
                    self._proc.wait(timeout=5)
                self._proc = None


class Forked:
    """A process the server forked, with what the tests use of `subprocess.Popen`."""

    def __init__(self, args: list[str], conn: socket.socket) -> None:
        self.args = args
        self.returncode: int | None = None
        self.cpu: float | None = None
        """The CPU seconds it spent, once it has ended (its own, not its children's)."""
        self._conn = conn
        self._buffer = b""
        self._lock = threading.Lock()
        first = self._message(timeout=60)
        if first is None or "pid" not in first:
            conn.close()
            raise RuntimeError(f"the fork server did not start {args}: {first!r}")
        self.pid: int = first["pid"]

    def _message(self, timeout: float | None) -> dict[str, Any] | None:
        """The next line the server wrote, or None (nothing within `timeout`)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            self._conn.settimeout(left)
            try:
                chunk = self._conn.recv(4096)
            except (TimeoutError, BlockingIOError):
                return None
            if not chunk:
                raise RuntimeError(f"the fork server closed the socket of {self.args}")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        message: dict[str, Any] = json.loads(line)
        return message

    def _ended(self, timeout: float | None) -> int | None:
        with self._lock:
            if self.returncode is None:
                message = self._message(timeout)
                if message is not None:
                    self.returncode = int(message["exit"])
                    self.cpu = float(message["cpu"])
                    self._conn.close()
            return self.returncode

    def poll(self) -> int | None:
        return self._ended(0.0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._ended(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


SERVER = Server()


def run(
    args: list[str],
    env: dict[str, str],
    cwd: Path | str | None,
    timeout: float,
    input_text: str | None,
) -> subprocess.CompletedProcess[str]:
    """`subprocess.run([*SLUICE, *args], capture_output=True, text=True, …)`, forked."""
    with (
        tempfile.TemporaryFile() as out,
        tempfile.TemporaryFile() as err,
        _stdin(input_text) as stdin,
    ):
        proc = SERVER.spawn(args, env, cwd, [stdin.fileno(), out.fileno(), err.fileno()])
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise subprocess.TimeoutExpired(args, timeout, _text(out), _text(err)) from None
        return subprocess.CompletedProcess(args, code, _text(out), _text(err))


def _stdin(input_text: str | None) -> Any:
    if input_text is None:
        return open(os.devnull, "rb")  # noqa: SIM115
    stdin = tempfile.TemporaryFile()  # noqa: SIM115
    stdin.write(input_text.encode(locale.getpreferredencoding(False)))
    stdin.seek(0)
    return stdin


def _text(file: Any) -> str:
    """What the process wrote, decoded as `subprocess.run(text=True)` decodes it."""
    file.seek(0)
    wrapper = io.TextIOWrapper(file, encoding=locale.getpreferredencoding(False))
    try:
        return wrapper.read()
    finally:
        wrapper.detach()


if __name__ == "__main__":
    main()
