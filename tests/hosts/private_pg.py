"""A PostgreSQL cluster of one test's own, which it may stop and start again.

`initdb` as the `postgres` user in a temporary directory it owns, then `pg_ctl` on a free
port of 127.0.0.1 (and a socket in that directory): about a second and a half here. No
fsync (the test's data need not survive a crash of the machine). `remove()` stops it
(`pg_ctl stop -m immediate`, by its own data directory, so no other server is touched),
kills its postmaster by the pid of its own `postmaster.pid` if that did not, and removes
the directory. What is missing (not root, no `postgres` user, no initdb) skips the test
with its reason.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from tests.redis_server import free_port


@dataclass
class PrivatePostgres:
    bin: Path
    dir: Path
    port: int

    @classmethod
    def make(cls) -> PrivatePostgres:
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
        if not found:
            pytest.skip("no PostgreSQL server binaries (/usr/lib/postgresql/*/bin/initdb)")
        if os.geteuid() != 0 or shutil.which("runuser") is None:
            pytest.skip("a private PostgreSQL cluster needs root and runuser (initdb as postgres)")
        try:
            owner = pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("no `postgres` user to run a private PostgreSQL cluster as")
        directory = Path(tempfile.mkdtemp(prefix="sluice-hosts-pg-"))
        os.chown(directory, owner.pw_uid, owner.pw_gid)
        cluster = cls(Path(found[-1]).parent, directory, free_port())
        cluster._as_postgres(
            "initdb", "-D", str(cluster.data), "-A", "trust", "-U", "postgres", "--no-sync"
        )
        return cluster

    @property
    def data(self) -> Path:
        return self.dir / "data"

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def _as_postgres(self, tool: str, *args: str, timeout: float = 60) -> None:
        done = subprocess.run(
            ["runuser", "-u", "postgres", "--", str(self.bin / tool), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        assert done.returncode == 0, f"{tool} {args}: {done.stdout}{done.stderr}"

    def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c full_page_writes=off -c synchronous_commit=off -c max_connections=200"
        )
        self._as_postgres(
            "pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.dir / "log"), "-w",
            "start",
        )  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        """Stop the server: `fast` ends every session (a restart's stop), `immediate` is
        a crash."""
        self._as_postgres("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def restart(self, down: float) -> None:
        """Every session ended, connections refused for `down` seconds, then up again."""
        self.stop()
        time.sleep(down)
        self.start()

    def create_database(self, name: str) -> str:
        engine = create_engine(self.url(), isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as conn:
                conn.execute(text(f'CREATE DATABASE "{name}"'))
        finally:
            engine.dispose()
        return self.url(name)

    def _postmaster_pid(self) -> int | None:
        pidfile = self.data / "postmaster.pid"
        try:
            return int(pidfile.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def remove(self) -> None:
        try:
            if self._postmaster_pid() is not None:
                with contextlib.suppress(AssertionError, subprocess.TimeoutExpired):
                    self.stop("immediate")
            pid = self._postmaster_pid()  # still there: ours, by our own data directory
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
