"""Hosts: each Sluice process (scheduler or worker) with links of its own to PostgreSQL
and the broker, which the test cuts, holds, slows and restores while the others keep theirs.

A `Host` runs `sluice scheduler` or `sluice worker` with `SLUICE_DATABASE_URL` and
`SLUICE_BROKER_URL` (and so the wake-ups, which go through the broker's Redis) pointing at
its own two `Link`s, in a process group of its own. Its tasks write their tries to
`<dir>/tries.log` (`HOSTS_DIR`, `HOSTS_NAME` in its environment; `tests.hosts.dag`).

`Hosts` makes the hosts of one test and tears them all down in `close()`: every process
group killed and reaped, every link closed; `leftovers()` says what is still there
(a port that accepts, a thread alive, a process group), for the harness to check.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO
from urllib.parse import urlsplit, urlunsplit

from sqlalchemy.engine import make_url

from tests.hosts.proxy import LOCALHOST, Link, Proxies
from tests.procs import Process, Sluice, start_logged


def pg_address(url: str) -> tuple[str, int]:
    parsed = make_url(url)
    return parsed.host or LOCALHOST, parsed.port or 5432


def broker_address(url: str) -> tuple[str, int]:
    parsed = urlsplit(url)
    assert parsed.scheme == "redis", f"hosts need a Redis broker, not {url}"
    return parsed.hostname or LOCALHOST, parsed.port or 6379


def via_pg(url: str, link: Link) -> str:
    """`url` (a SQLAlchemy URL) with its host and port the link's."""
    return make_url(url).set(host=LOCALHOST, port=link.port).render_as_string(hide_password=False)


def via_broker(url: str, link: Link) -> str:
    parsed = urlsplit(url)
    auth = parsed.netloc.rpartition("@")[0]
    netloc = f"{auth}@" if auth else ""
    return urlunsplit(parsed._replace(netloc=f"{netloc}{LOCALHOST}:{link.port}"))


@dataclass
class Host:
    """One Sluice process and its two links (`pg`, `broker`)."""

    name: str
    role: str
    args: tuple[str, ...]
    pg: Link
    broker: Link
    dir: Path
    env: dict[str, str]
    log_path: Path
    proc: Process | None = None
    _log: IO[bytes] | None = field(default=None, repr=False)

    @property
    def tries_log(self) -> Path:
        return self.dir / "tries.log"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> Host:
        assert self.proc is None or self.proc.poll() is not None, f"{self.name} runs already"
        self._log = open(self.log_path, "ab")  # noqa: SIM115 (closed in `reap`)
        # its own session and process group (`start_logged`): stopped as one
        self.proc = start_logged(list(self.args), self.env, None, self._log)
        return self

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM to the main process (a worker's warm shutdown waits for its tries),
        then the group killed if it does not end in `timeout`; its exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.reap(timeout)

    def kill(self) -> int | None:
        """SIGKILL to the whole group, at once."""
        if self.proc is None:
            return None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        return self.reap(10.0)

    def reap(self, timeout: float) -> int | None:
        assert self.proc is not None
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # pool children left, if any
        deadline = time.monotonic() + 10
        while _group_alive(self.proc.pid) and time.monotonic() < deadline:
            time.sleep(0.02)  # the killed children, until init has reaped them
        if self._log is not None:
            self._log.close()
            self._log = None
        return self.proc.returncode

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


class Hosts:
    """The hosts of one test, on `sluice`'s database, broker, DAGs folder and settings."""

    def __init__(
        self,
        sluice: Sluice,
        root: Path,
        *,
        pg: tuple[str, int] | None = None,
        broker: tuple[str, int] | None = None,
    ) -> None:
        self.sluice = sluice
        self.root = root
        self.pg_upstream = pg or pg_address(sluice.database_url)
        self.broker_upstream = broker or broker_address(sluice.broker_url)
        self.proxies = Proxies()
        self.made: list[Host] = []

    def __enter__(self) -> Hosts:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getitem__(self, name: str) -> Host:
        """The host this test made as `name`."""
        (found,) = (h for h in self.made if h.name == name)
        return found

    def host(self, name: str, role: str, *args: str, start: bool = True) -> Host:
        """A host `name` running `sluice ARGS`, with links of its own."""
        assert all(h.name != name for h in self.made), f"host {name} exists"
        pg = self.proxies.link(f"{name}/pg", self.pg_upstream)
        broker = self.proxies.link(f"{name}/broker", self.broker_upstream)
        directory = self.root / name
        directory.mkdir(parents=True, exist_ok=True)
        env = dict(self.sluice.env)
        env.update(
            SLUICE_DATABASE_URL=via_pg(self.sluice.database_url, pg),
            SLUICE_BROKER_URL=via_broker(self.sluice.broker_url, broker),
            HOSTS_NAME=name,
            HOSTS_DIR=str(directory),
        )
        env.pop("SLUICE_WAKEUP_URL", None)  # the broker's Redis, through the broker link
        host = Host(
            name=name,
            role=role,
            args=(*self.sluice.argv, *args),
            pg=pg,
            broker=broker,
            dir=directory,
            env=env,
            log_path=self.sluice.log_dir / f"host-{name}.log",  # in `sluice.logs()`
        )
        self.made.append(host)
        return host.start() if start else host

    def scheduler(self, name: str, *, start: bool = True) -> Host:
        return self.host(name, "scheduler", "scheduler", start=start)

    def worker(self, name: str, concurrency: int = 2, *, start: bool = True) -> Host:
        args = ("worker", "-Q", "default", "-c", str(concurrency))
        return self.host(name, "worker", *args, start=start)

    def stop_all(self) -> None:
        """SIGTERM to every host at once (side by side), then each reaped."""
        for host in self.made:
            if host.alive:
                assert host.proc is not None
                host.proc.send_signal(signal.SIGTERM)
        for host in self.made:
            if host.proc is not None:
                host.reap(20.0)

    def close(self) -> None:
        """Every host's process group killed and reaped, then every link closed."""
        try:
            for host in self.made:
                if host.proc is not None and host.proc.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(host.proc.pid, signal.SIGKILL)
            for host in self.made:
                if host.proc is not None:
                    host.reap(10.0)
        finally:
            self.proxies.close()

    def logs(self) -> str:
        return "\n".join(f"==== host {h.name}\n{h.log()[-6000:]}" for h in self.made)

    def leftovers(self) -> list[str]:
        """What this harness made and is still there: empty once `close()` did its work."""
        left = []
        for link in self.proxies.made:
            if _accepts(link.port):
                left.append(f"{link!r} still accepts connections")
        if self.proxies.thread.is_alive():
            left.append(f"thread {self.proxies.thread.name} is alive")
        for host in self.made:
            if host.proc is None:
                continue
            if host.proc.returncode is None:
                left.append(f"host {host.name} (pid {host.proc.pid}) was not reaped")
            if _group_alive(host.proc.pid):
                left.append(f"host {host.name}: process group {host.proc.pid} has processes")
        return left


def _accepts(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1.0)
        try:
            sock.connect((LOCALHOST, port))
        except OSError:
            return False
        return True


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
