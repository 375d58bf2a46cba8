"""Evaluating a watch (`sluice.Watch`) in a fresh subprocess, and that subprocess's entry
point (`python -m sluice.tasks.watching`).

The request goes in on stdin as JSON (`path`, `dag_id`, `cursor`, `max_conf_bytes`); the
answer comes back on stdout as one JSON line: `{"requests": [{"run_key", "conf"}],
"cursor": ...}` or `{"error": "one line"}`. While user code runs, file descriptor 1
points at stderr: its prints never corrupt the answer. The caller kills the subprocess's
group past `timeout` (a watch that hangs), and reads at most `ANSWER_MAX_BYTES`.

Invariants: the subprocess's environment has none of the deployment's secrets
(`drop_env`); an answer is untrusted (`Evaluation.of` checks it again).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sluice.tasks.conf_bounds import conf_problem
from sluice.tasks.loader import load_file
from sluice.tasks.parsing import describe_error, subprocess_env
from sluice.tasks.watch import CURSOR_MAX, REQUESTS_MAX, RunRequest

ANSWER_MAX_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class Evaluation:
    """What one evaluation of a watch gave: its run requests and the cursor it set (or
    the cursor it was given), or its error (then nothing else counts)."""

    requests: list[RunRequest] = field(default_factory=list)
    cursor: str | None = None
    error: str | None = None

    @classmethod
    def of(
        cls, answer: Any, cursor: str | None, max_conf_bytes: int, max_conf_depth: int
    ) -> Evaluation:
        """The evaluation an (untrusted) answer says, checked; an error if it is bad."""
        if not isinstance(answer, dict):
            return cls(error="the watch's process answered nonsense")
        if answer.get("error") is not None:
            return cls(error=str(answer["error"])[:2000])
        try:
            requests = [RunRequest(r["run_key"], r["conf"]) for r in answer["requests"]]
            new_cursor = answer.get("cursor", cursor)
            _check(requests, new_cursor, max_conf_bytes, max_conf_depth)
        except (KeyError, TypeError, ValueError) as exc:
            return cls(error=f"{type(exc).__name__}: {exc}"[:2000])
        return cls(requests, new_cursor)


def _check(
    requests: list[RunRequest], cursor: object, max_conf_bytes: int, max_conf_depth: int
) -> None:
    """ValueError unless the answer is within its bounds: the runs asked for at once, the
    cursor, and each conf as every conf Sluice makes a run from (`conf_problem`)."""
    if len(requests) > REQUESTS_MAX:
        raise ValueError(f"a watch may ask for at most {REQUESTS_MAX} runs at once")
    if cursor is not None and (not isinstance(cursor, str) or len(cursor) > CURSOR_MAX):
        raise ValueError(f"a cursor must be text of at most {CURSOR_MAX} characters")
    for request in requests:
        problem = conf_problem(request.conf, max_conf_bytes, max_conf_depth)
        if problem is not None:
            raise ValueError(f"run key {request.run_key!r}: {problem}")


def evaluate(
    path: str,
    dag_id: str,
    cursor: str | None,
    *,
    timeout: float,
    max_conf_bytes: int,
    max_conf_depth: int,
    drop_env: Collection[str] = (),
    running: set[int] | None = None,
) -> Evaluation:
    """Call DAG `dag_id`'s watch (its file at `path`) in a fresh subprocess, at most
    `timeout` seconds; its run requests and cursor, or its error (one line). The
    subprocess's pid is in `running` while it runs (its process group: the caller may
    kill it when it stops)."""
    env = subprocess_env(drop_env)
    request = {
        "path": path,
        "dag_id": dag_id,
        "cursor": cursor,
        "max_conf_bytes": max_conf_bytes,
        "timeout": timeout,
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "sluice.tasks.watching"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
    )
    if running is not None:
        running.add(proc.pid)
    try:
        out, _ = proc.communicate(json.dumps(request).encode("utf-8"), timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return Evaluation(error=f"the watch ran past its timeout ({timeout:g}s) and was killed")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # what it left behind in its group
        if running is not None:
            running.discard(proc.pid)
    if len(out) > ANSWER_MAX_BYTES:
        return Evaluation(error="the watch's answer is too large")
    lines = out.decode("utf-8", "replace").strip().splitlines()
    if not lines:
        return Evaluation(error=f"the watch's process exited with code {proc.returncode}")
    try:
        answer = json.loads(lines[-1])
    except (ValueError, RecursionError):  # nested past the parser's stack: nonsense too
        return Evaluation(error="the watch's process answered nonsense")
    return Evaluation.of(answer, cursor, max_conf_bytes, max_conf_depth)


def _answer(request: dict[str, Any]) -> dict[str, Any]:
    """Load the file, call the DAG's watch; the answer (user code's errors in one line)."""
    path, cursor = request["path"], request.get("cursor")
    holder = {"cursor": cursor}

    def set_cursor(value: str) -> None:
        if not isinstance(value, str):
            raise TypeError(f"set_cursor takes text, got {type(value).__name__}")
        holder["cursor"] = value

    try:
        dags = {d.dag_id: d for d in load_file(path)}
        dag = dags.get(request["dag_id"])
        if dag is None or dag.watch is None:
            return {"error": f"DAG {request['dag_id']!r} has no watch in {Path(path).name}"}
        context = {
            "dag_id": dag.dag_id,
            "cursor": cursor,
            "set_cursor": set_cursor,
            "logical_date": dt.datetime.now(dt.UTC).isoformat(),
        }
        made = dag.watch.fn(context)
        requests = []
        for item in made if made is not None else ():
            if not isinstance(item, RunRequest):
                raise TypeError(f"a watch yields sluice.RunRequest, got {type(item).__name__}")
            requests.append({"run_key": item.run_key, "conf": item.conf})
            if len(requests) > REQUESTS_MAX:
                raise ValueError(f"a watch may ask for at most {REQUESTS_MAX} runs at once")
        answer = {"requests": requests, "cursor": holder["cursor"]}
        json.dumps(answer, allow_nan=False)  # a conf that is not JSON is the watch's error
        return answer
    except Exception as exc:
        return {"error": describe_error(exc, path)}


def _outlive_nobody(timeout: float) -> None:
    """The subprocess ends by itself past its timeout (SIGALRM's default action) or when
    the process that started it is gone (killed without a chance to kill it)."""
    signal.alarm(math.ceil(timeout) + 5)
    parent = os.getppid()

    def watch_parent() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(3)

    threading.Thread(target=watch_parent, daemon=True).start()


def main() -> None:
    request = json.loads(sys.stdin.read())
    _outlive_nobody(float(request.get("timeout") or 60))
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # user code's prints go to stderr
    answer = _answer(request)
    try:
        text = json.dumps(answer, allow_nan=False)
    except ValueError as exc:
        text = json.dumps({"error": f"ValueError: the watch's answer is not JSON: {exc}"})
    out.write(text + "\n")
    out.flush()


if __name__ == "__main__":
    main()
