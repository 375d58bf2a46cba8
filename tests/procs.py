"""Starting `sluice` commands as real subprocesses, and waiting on the database."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar
from unittest import mock

from sqlalchemy import Connection, text

from tests import forkserver
from tests.engines import engine_for, forget

T = TypeVar("T")

SLUICE = [sys.executable, "-m", "sluice.scheduler.cli.main"]

Process = subprocess.Popen[bytes] | forkserver.Forked
"""A started `sluice` process: forked by the fork server, or a `Popen` of its own."""


def run_sluice(
    *args: str,
    env: dict[str, str] | None = None,
    cwd: Path | str | None = None,
    timeout: float = 120,
    input_text: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """`subprocess.run([*SLUICE, *args], capture_output=True, text=True, …)` with `env`
    (this process's by default): forked by this pytest process's fork server where the
    environment allows it (`tests.forkserver`), else a `python -m` of its own."""
    env = dict(os.environ) if env is None else env
    if forkserver.SERVER.fork_compatible(env):
        return forkserver.run(list(args), env, cwd, timeout, input_text)
    return captured([*SLUICE, *args], env, cwd, timeout, input_text)


def captured(
    argv: list[str],
    env: dict[str, str],
    cwd: Path | str | None,
    timeout: float,
    input_text: str | None,
) -> subprocess.CompletedProcess[str]:
    """`argv` run to its end, its output captured as text (stdin: `input_text` or none)."""
    return subprocess.run(
        argv,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        input=input_text,
        stdin=None if input_text is not None else subprocess.DEVNULL,
    )


def start_logged(
    argv: list[str], env: dict[str, str], cwd: Path | str | None, log: IO[bytes]
) -> Process:
    """`argv` started in a session of its own, with no stdin and its stdout and stderr in
    `log`: forked by the fork server when it is `python -m sluice…` with an environment
    that allows it (`tests.forkserver`), else a `Popen`."""
    if argv[: len(SLUICE)] == SLUICE and forkserver.SERVER.fork_compatible(env):
        with open(os.devnull, "rb") as stdin:
            fds = [stdin.fileno(), log.fileno(), log.fileno()]
            return forkserver.SERVER.spawn(argv[len(SLUICE) :], env, cwd, fds)
    return subprocess.Popen(
        argv,
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def wait_until(check: Callable[[], T | None], timeout: float = 30.0, every: float = 0.1) -> T:
    """Poll `check` until it returns something truthy; fail the test at the deadline."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"condition not met within {timeout}s (last value: {last!r})")


def written(path: Path, timeout: float = 20.0) -> str:
    """The text of `path` once a task or callback has written it: the file exists as soon
    as the writer opens it, and its few bytes arrive with the writer's one flush."""
    return wait_until(lambda: path.read_text() if path.exists() else "", timeout=timeout)


@dataclass
class Sluice:
    """Runs `sluice` against one test's database, Redis db and DAGs folder."""

    database_url: str
    broker_url: str
    dags_folder: Path
    log_dir: Path
    extra_env: dict[str, str] = field(default_factory=dict)
    procs: list[Process] = field(default_factory=list)
    argv: list[str] = field(default_factory=lambda: list(SLUICE))
    """How `sluice` is started (`python -m …` unless a test uses the console script)."""
    cwd: Path | None = None
    """The working directory of every command (the test's own by default)."""

    def __post_init__(self) -> None:
        self.namespace = f"t{uuid.uuid4().hex[:8]}"

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLUICE_", "OTEL_"))}
        env.update(
            SLUICE_DATABASE_URL=self.database_url,
            SLUICE_BROKER_URL=self.broker_url,
            SLUICE_DAGS_FOLDER=str(self.dags_folder),
            SLUICE_NAMESPACE=self.namespace,
            SLUICE_LOOP_INTERVAL="0.5",
            SLUICE_HEARTBEAT_INTERVAL="0.5",
            SLUICE_HEARTBEAT_TIMEOUT="5",
            SLUICE_QUEUED_TIMEOUT="10",
            SLUICE_DAG_REFRESH_INTERVAL="0.5",
            SLUICE_PARSE_TIMEOUT="4",
            PYTHONUNBUFFERED="1",
        )
        env.update(self.extra_env)
        return env

    def cli(
        self, *args: str, timeout: float = 60, input_text: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        if self.argv == SLUICE:
            return run_sluice(
                *args, env=self.env, cwd=self.cwd, timeout=timeout, input_text=input_text
            )
        return captured([*self.argv, *args], self.env, self.cwd, timeout, input_text)

    def ok(self, *args: str) -> str:
        done = self.cli(*args)
        assert done.returncode == 0, f"sluice {' '.join(args)} failed:\n{done.stderr}"
        return done.stdout

    def start(self, name: str, *args: str) -> Process:
        with open(self.log_dir / f"{name}-{len(self.procs)}.log", "wb") as log:
            proc = start_logged([*self.argv, *args], self.env, self.cwd, log)
        self.procs.append(proc)
        return proc

    def scheduler(self) -> Process:
        return self.start("scheduler", "scheduler")

    def worker(self, queues: str = "default", concurrency: int = 2) -> Process:
        return self.start("worker", "worker", "-Q", queues, "-c", str(concurrency))

    def stop(self, proc: Process, sig: int = signal.SIGTERM) -> None:
        """Signal the process by its own pid; kill its group if it does not stop."""
        if proc.poll() is None:
            proc.send_signal(sig)
        self._reap(proc)

    @staticmethod
    def _reap(proc: Process) -> None:
        """Wait for a signalled process (15 s), then kill its group and what is left of it."""
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # leftover pool children, if any

    def stop_all(self) -> None:
        """SIGTERM every process at once (they shut down side by side), then reap each."""
        procs = list(reversed(self.procs))
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            self._reap(proc)
        forget(self.database_url)

    def kill_all(self) -> None:
        """SIGKILL every process's group at once, then reap each: the end of a test, whose
        database, Redis db and vhost are dropped next (a graceful stop is what a test asks
        for with `stop` or `stop_all`, never the cleanup's business)."""
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
        for proc in self.procs:
            self._reap(proc)
        forget(self.database_url)

    def logs(self) -> str:
        return "\n".join(
            f"==== {p.name}\n{p.read_text(errors='replace')[-6000:]}"
            for p in sorted(self.log_dir.glob("*.log"))
        )

    # -- reading state ---------------------------------------------------------------------
    def trigger(self, dag_id: str, *args: str) -> str:
        return self.run("dags", "trigger", dag_id, *args).strip()

    def run_state(self, dag_id: str, run_id: str) -> str:
        return self.run("dags", "state", dag_id, run_id).strip()

    def task_states(self, dag_id: str, run_id: str) -> dict[str, dict[str, Any]]:
        """`tasks states --json` by task id (a mapped task's indexes as `task[i]`)."""
        rows = json.loads(self.run("tasks", "states", dag_id, run_id, "--json"))
        return {ti_key(row): row for row in rows}

    def run(self, *args: str) -> str:
        """What `sluice ARGS` prints, for a test that uses a command to set up or to
        look (a trigger, a run's state): its parser and handler run in this process,
        with this deployment's environment (a new interpreter costs a CLI call about a
        second and a half of CPU, on a suite that is CPU-bound). The command itself is
        tested as users run it, through `cli` and `ok`; a test that runs `sluice` its
        own way (`argv`, `cwd`) runs it so here too."""
        if self.argv != SLUICE or self.cwd is not None:
            return self.ok(*args)
        from sluice.scheduler.cli.context import Cli
        from sluice.scheduler.cli.main import build_parser
        from sluice.scheduler.core.settings import Settings

        printed = io.StringIO()
        # No idle-in-transaction limit for a command run here: this process's other
        # threads (a served API, a test's proxies) and a loaded machine can keep it from
        # the CPU between two statements for longer than the tests' 2.5 s, which a
        # `sluice` process of its own is not exposed to the same way.
        env = {**self.env, "SLUICE_DB_IDLE_IN_TX_TIMEOUT": "0"}
        with (
            mock.patch.dict(os.environ, env, clear=True),
            contextlib.redirect_stdout(printed),
        ):
            cli = Cli(Settings.from_env(), role=args[0])
            try:
                parsed = build_parser(args[0]).parse_args(list(args))
                code = parsed.func(cli, parsed)
            finally:
                if "engine" in vars(cli):
                    cli.engine.dispose()
        assert code == 0, f"sluice {' '.join(args)} returned {code}"
        return printed.getvalue()

    def _connect(self) -> Connection:
        """A connection of this test's database, from its pool (`tests.engines`)."""
        return engine_for(self.database_url).connect()

    def db_run_state(self, dag_id: str, run_id: str) -> str | None:
        """The run's state read straight from the database (cheap enough to poll)."""
        with self._connect() as conn:
            return conn.execute(
                text("SELECT state FROM dag_run WHERE dag_id = :d AND run_id = :r"),
                {"d": dag_id, "r": run_id},
            ).scalar()

    def db_task_states(self, dag_id: str, run_id: str) -> dict[str, dict[str, Any]]:
        """The run's TIs as `task_states` gives them (task_id, state, try_number,
        hostname, error), read straight from the database: for tests that poll or read
        many runs (`task_states` starts a `sluice` process each time); a mapped task's
        indexes keyed `task[i]`."""
        with self._connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT task_id, map_index, state, try_number, hostname, error "
                    "FROM task_instance WHERE dag_id = :d AND run_id = :r ORDER BY id"
                ),
                {"d": dag_id, "r": run_id},
            ).mappings()
            found = [dict(row) for row in rows]
            for row in found:
                row["map_index"] = None if row["map_index"] < 0 else row["map_index"]
            return {ti_key(row): row for row in found}

    def db_stored_tasks(self, dag_id: str) -> set[str]:
        """The task ids of the DAG's stored version (what the last sync of the folder
        parsed), read straight from the database."""
        with self._connect() as conn:
            query = text("SELECT serialized FROM dag WHERE dag_id = :d")
            serialized = conn.execute(query, {"d": dag_id}).scalar_one()
        spec = serialized if isinstance(serialized, dict) else json.loads(serialized)
        return set(spec["tasks"])

    def wait_run(self, dag_id: str, run_id: str, timeout: float = 60) -> str:
        """The run's end state, once it has one, read from the database as `dags state`
        reads it (a `sluice` process per wait cost 0.7 s of CPU: the CLI's own output is
        the business of the CLI's tests)."""
        try:
            return wait_until(
                lambda: _ended_state(self.db_run_state(dag_id, run_id)), timeout=timeout
            )
        except AssertionError:
            raise AssertionError(
                f"run {run_id} did not finish: {self.task_states(dag_id, run_id)}\n{self.logs()}"
            ) from None


def _ended_state(state: str | None) -> str | None:
    return state if state in ("success", "failed") else None


def ti_key(row: dict[str, Any]) -> str:
    """A TI's key in `task_states`: its task id, with `[i]` for index i of a mapped task."""
    index = row.get("map_index")
    return str(row["task_id"]) if index is None else f"{row['task_id']}[{index}]"


def standalone(
    cwd: Path, dags_folder: Path, database_url: str, *args: str, **env: str
) -> subprocess.CompletedProcess[str]:
    """`sluice standalone ARGS` in `cwd` on `database_url`, with no SLUICE_/OTEL_ setting
    of this process's but those given (`env`)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SLUICE_", "OTEL_"))}
    clean.update(
        SLUICE_DATABASE_URL=database_url,
        SLUICE_DAGS_FOLDER=str(dags_folder),
        SLUICE_LOOP_INTERVAL="0.2",
        **env,
    )
    return run_sluice("standalone", *args, env=clean, cwd=cwd, timeout=120)


def printed_states(stdout: str) -> dict[str, dict[str, Any]]:
    """The TIs of the one JSON document `sluice standalone --trigger … --json` prints."""
    return {row["task_id"]: row for row in json.loads(stdout)["tasks"]}
