"""Parsing DAG files in a fresh subprocess, and that subprocess's entry point.

``parse_files`` runs ``python -m sluice.tasks.parsing`` once for a batch of files (starting
an interpreter costs more than parsing a file), with the folder that holds the ``sluice``
package first on ``PYTHONPATH`` (a source checkout needs it; an install has it anyway). The
request goes in on stdin as JSON; each file's
result comes back on stdout as one JSON line, written as soon as that file is done, so a
crash only costs the files not reported yet. Inside, file descriptor 1 is pointed at stderr
while user code runs: its prints never corrupt the protocol.

Invariants: every path asked for gets a result; an error is one line; a file with an error
has no DAGs; a dag_id already defined by an earlier file of the batch is an error for the
later file. A file that kills or hangs the subprocess gets the error; the files after it
are parsed in a new subprocess.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import traceback
from collections import deque
from collections.abc import Collection
from pathlib import Path
from types import FrameType
from typing import IO, Any, TypedDict

from sluice.tasks.errors import DagDefinitionError
from sluice.tasks.loader import load_file
from sluice.tasks.serialize import serialize_dag

log = logging.getLogger(__name__)

_PACKAGE_DIR = str(Path(__file__).parent) + os.sep  # as imported: frames name it so
_PACKAGE_ROOT = str(Path(__file__).parents[2])
"""The folder holding the `sluice` package (this file is sluice/tasks/parsing.py)."""
_MAX_ERROR_CHARS = 2000


class FileResult(TypedDict):
    """What parsing one file produced: its serialized DAGs, or a one-line error."""

    dags: list[dict[str, Any]]
    error: str | None


def parse_files(
    paths: list[str], timeout: float, *, drop_env: Collection[str] = ()
) -> dict[str, FileResult]:
    """Parse ``paths`` in a fresh subprocess, ``timeout`` seconds per file; keyed by path.
    The subprocess's environment is this process's without the variables ``drop_env``
    names (the deployment's secrets: a DAG file's top-level code is user code).

    If the subprocess dies, or runs past ``len(batch) * timeout + 5`` seconds, the file it was
    on gets that as its error and the files after it are parsed again in a new subprocess.
    """
    results: dict[str, FileResult] = {}
    seen: dict[str, str] = {}
    remaining = list(dict.fromkeys(paths))
    while remaining:
        reported, failure = _run_batch(remaining, timeout, seen, drop_env)
        results.update(reported)
        for path, result in reported.items():
            for dag in result["dags"]:
                seen.setdefault(dag["dag_id"], path)
        unreported = [p for p in remaining if p not in reported]
        if not unreported:
            break
        culprit, remaining = unreported[0], unreported[1:]
        results[culprit] = {"dags": [], "error": _one_line(failure or "not parsed")}
    return results


def subprocess_env(drop_env: Collection[str]) -> dict[str, str]:
    """The environment of a subprocess that runs user code (`python -m sluice.tasks.…`):
    this process's, without the variables `drop_env` names (the deployment's secrets),
    the folder holding the `sluice` package first on PYTHONPATH (a source checkout needs
    it; an install has it anyway)."""
    env = {name: value for name, value in os.environ.items() if name not in drop_env}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
    return env


STDERR_TAIL_BYTES = 64 * 1024
"""Most bytes of a parser's stderr kept (the newest): what DAG files print at import goes
there, and a file printing hundreds of megabytes must not fill the scheduler's memory."""


def _run_batch(
    paths: list[str], timeout: float, seen: dict[str, str], drop_env: Collection[str]
) -> tuple[dict[str, FileResult], str | None]:
    """One parser subprocess: what it reported, and why it stopped early (None if it did not)."""
    env = subprocess_env(drop_env)
    request = json.dumps({"paths": paths, "timeout": timeout, "seen": seen}).encode("utf-8")
    deadline = len(paths) * timeout + 5
    proc = subprocess.Popen(
        [sys.executable, "-m", "sluice.tasks.parsing"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    out: list[bytes] = []
    err: deque[bytes] = deque()
    readers = [
        threading.Thread(target=_read_all, args=(proc.stdout, out), daemon=True),
        threading.Thread(target=_read_tail, args=(proc.stderr, err), daemon=True),
    ]
    for reader in readers:
        reader.start()
    failure: str | None = None
    try:
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.write(request)
            proc.stdin.close()
        proc.wait(timeout=deadline)
    except subprocess.TimeoutExpired:
        failure = f"DAG parser process hung past {deadline:g}s on this file and was killed"
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    for reader in readers:
        reader.join(timeout=5)  # a grandchild outside the group may hold the pipes
    reported: dict[str, FileResult] = {}
    for line in b"".join(out).decode("utf-8", errors="replace").splitlines():
        try:
            item = json.loads(line)
            reported[item["path"]] = {"dags": item["dags"], "error": item["error"]}
        except (ValueError, KeyError, TypeError):
            log.warning("unexpected line from the DAG parser: %.200s", line)
    if failure is None and len(reported) < len(paths):
        failure = f"DAG parser process exited with code {proc.returncode} on this file"
    level = logging.WARNING if failure else logging.DEBUG
    for line in b"".join(err).decode("utf-8", errors="replace").splitlines():
        log.log(level, "DAG parser stderr: %s", line)
    return reported, failure


def _read_all(stream: IO[bytes], into: list[bytes]) -> None:
    """The parser's protocol (stdout): every line, as it comes."""
    for chunk in iter(lambda: stream.read(65536), b""):
        into.append(chunk)


def _read_tail(stream: IO[bytes], tail: deque[bytes]) -> None:
    """The parser's stderr, of which only the last STDERR_TAIL_BYTES are kept."""
    size = 0
    for chunk in iter(lambda: stream.read(65536), b""):
        tail.append(chunk)
        size += len(chunk)
        while size - len(tail[0]) >= STDERR_TAIL_BYTES:
            size -= len(tail.popleft())


def _one_line(message: str) -> str:
    line = " ".join(part.strip() for part in message.splitlines() if part.strip())
    return line if len(line) <= _MAX_ERROR_CHARS else line[: _MAX_ERROR_CHARS - 3] + "..."


def describe_error(exc: BaseException, path: str) -> str:
    """One line for a failed import: "<Type>: <message> (file.py, line N)".

    The location is the deepest frame of user code (not this package, not importlib):
    the DAG file or a module it imports. A ``DagDefinitionError`` is its message alone.
    """
    if isinstance(exc, DagDefinitionError):
        return _one_line(str(exc))
    where: tuple[str, int | None] = (Path(path).name, None)
    if isinstance(exc, SyntaxError):
        where = (Path(exc.filename or path).name, exc.lineno)
        message = exc.msg
    else:
        user_frames = [
            f
            for f in traceback.extract_tb(exc.__traceback__)
            if not f.filename.startswith("<") and not f.filename.startswith(_PACKAGE_DIR)
        ]
        if user_frames:
            where = (Path(user_frames[-1].filename).name, user_frames[-1].lineno)
        message = str(exc)
    location = f" ({where[0]}, line {where[1]})" if where[1] else f" ({where[0]})"
    return _one_line(f"{type(exc).__name__}: {message}{location}")


class _ParseTimeout(BaseException):
    """Raised by SIGALRM in the parser (a BaseException: user code's ``except Exception``
    must not swallow it)."""


def _parse_one(path: str, timeout: float, seen: dict[str, str]) -> FileResult:
    """Import one file under a SIGALRM ``timeout``; ``seen`` maps dag_id to the defining path."""
    active = [True]

    def on_alarm(signum: int, frame: FrameType | None) -> None:
        if active[0]:
            raise _ParseTimeout

    signal.signal(signal.SIGALRM, on_alarm)
    try:
        try:
            signal.setitimer(signal.ITIMER_REAL, timeout)
            dags = [serialize_dag(dag) for dag in load_file(path)]
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            active[0] = False
    except _ParseTimeout:
        return {"dags": [], "error": f"timed out after {timeout:g}s"}
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # SystemExit from a DAG file is its error too
        return {"dags": [], "error": describe_error(exc, path)}
    for dag in dags:
        if dag["dag_id"] in seen:
            return {
                "dags": [],
                "error": f"dag_id '{dag['dag_id']}' already defined in {seen[dag['dag_id']]}",
            }
    for dag in dags:
        seen[dag["dag_id"]] = path
    return {"dags": dags, "error": None}


def main() -> None:
    """Subprocess entry point: JSON request on stdin, one JSON line per file on stdout."""
    request = json.loads(sys.stdin.read())
    protocol = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # user prints (Python or C level) go to stderr
    sys.stdout = sys.stderr
    seen: dict[str, str] = dict(request.get("seen") or {})
    timeout = float(request["timeout"])
    for path in request["paths"]:
        result = _parse_one(path, timeout, seen)
        protocol.write(json.dumps({"path": path, **result}) + "\n")
        protocol.flush()
    protocol.close()
    sys.stderr.flush()
    os._exit(0)  # do not wait for threads a DAG file may have started


if __name__ == "__main__":
    main()
