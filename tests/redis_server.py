"""Redis servers of the tests' own: the tests never touch the machine's Redis.

Each pytest process (each pytest-xdist worker) starts one `redis-server` on a free port
the first time a test needs Redis (`session_redis`) and stops it, by its pid, when the
session ends (`stop_session_redis`, from `pytest_unconfigure`). Its 16 dbs are this
process's alone, so a test may flush the db it was given without touching anyone's data.
A test that kills and restarts Redis starts an `OwnRedis` of its own.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import redis

REDIS_SERVER = shutil.which("redis-server")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class OwnRedis:
    """One `redis-server` on 127.0.0.1:`port`: no persistence, its own process group."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self._dir = tempfile.mkdtemp(prefix="sluice-test-redis-")

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def start(self, timeout: float = 10.0) -> None:
        if REDIS_SERVER is None:
            raise RuntimeError("redis-server is not installed (the tests run their own Redis)")
        self.proc = subprocess.Popen(
            [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
            + ["--appendonly", "no", "--dir", self._dir, "--databases", "16"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        client = redis.Redis(port=self.port, socket_connect_timeout=1.0)
        deadline = time.monotonic() + timeout
        try:
            while not _pings(client):
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.kill()
                    raise RuntimeError(f"redis-server did not start on port {self.port}")
                time.sleep(0.02)
        finally:
            client.close()

    def kill(self) -> None:
        """SIGKILL (every message lost, as a crashed Redis loses them), then reaped."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        shutil.rmtree(self._dir, ignore_errors=True)


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False


_session: OwnRedis | None = None


def session_redis() -> OwnRedis:
    """This process's Redis, started on first use."""
    global _session
    if _session is None:
        server = OwnRedis()
        server.start()
        _session = server
    return _session


def stop_session_redis() -> None:
    global _session
    server, _session = _session, None
    if server is not None:
        server.stop()
