"""W1 and W2 with the workers' PostgreSQL a few milliseconds away (issue 46, item 4).

A cross-zone deployment: the scheduler next to PostgreSQL, the workers in another zone,
every round trip between a worker and PostgreSQL some milliseconds longer. tc netem is
not available on the bench's machine, so the workers reach PostgreSQL through a TCP
proxy of the bench's (`bench.delay_proxy`, a process of its own) that adds `ms` to every
round trip (half each way); the scheduler, and the bench's own reads, keep their direct
link. The same proxy at 0 ms separates the proxy's own cost from the delay's.

The rows: `W1+<ms>ms` (W1's fan-out, tasks/s) and `W2+<ms>ms` (W2's chain, the hop) for
`DELAYS_MS`. One worker (`-c 4`, as for W1 and W2) is started through the proxy; the
settings are then measured in rounds — each round one W2 chain and one W1 run at 0 ms,
then at 2 ms, then at 10 ms (the delay changed on the proxy, the worker's pooled
connections kept) — so that the machine's drift weighs on every setting alike. W1's
ratio to the proxy at 0 ms is the median of the rounds' ratios; W2's extra time a hop is
the difference of the pooled hop medians, and over the delay, the round trips a hop
waits for (`round_trips_per_hop`). The proxy's asyncio timers wake up to a millisecond
late, so each round also times `SELECT 1` through the proxy and directly (`added_rtt_ms`,
what the proxy really adds), and the round trips over that delay, less the proxy's at
0 ms, are `round_trips_per_hop_measured_delay`. CPU a task: the worker (main and pool
processes), the scheduler and the proxy, read from /proc over each run.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import psycopg
from sqlalchemy.engine import make_url

from bench.dagfiles import fanout_tasks
from bench.live import LiveEnv
from bench.metrics import (
    chain_hops,
    median,
    median_run,
    read_runs,
    read_tis,
    run_seconds,
    summary_ms,
    throughput,
)
from bench.procs import REPO_ROOT, BenchError, clean_env, cpu_seconds
from bench.sizes import DAG_W1, DAG_W2, DELAYS_MS, LATENCY, Sizes, latency_name

Result = dict[str, Any]
name = latency_name


class DelayProxy:
    """A `python -m bench.delay_proxy` process (its own session) forwarding a port of
    127.0.0.1 to `upstream`, its delay set through its stdin (`set_delay`)."""

    def __init__(self, upstream: tuple[str, int], log: Path, timeout: float = 30.0) -> None:
        self.timeout = timeout
        with open(log, "wb") as err:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", "bench.delay_proxy", upstream[0], str(upstream[1])],
                env=clean_env({}),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                start_new_session=True,
                cwd=str(REPO_ROOT),
                text=True,
                bufsize=1,
            )
        self.log = log
        try:
            self.port = int(self._answer("port")[0])
        except BaseException:
            self.stop()
            raise
        self.delay_ms = 0.0

    @property
    def pid(self) -> int:
        return self.popen.pid

    def url(self, database_url: str) -> str:
        """`database_url` through this proxy."""
        url = make_url(database_url).set(host="127.0.0.1", port=self.port)
        return url.render_as_string(hide_password=False)

    def set_delay(self, ms: float) -> int:
        """Every round trip `ms` longer from now on; the connections accepted so far."""
        stdin = self.popen.stdin
        assert stdin is not None
        stdin.write(f"{ms:g}\n")
        stdin.flush()
        words = self._answer("delay")
        self.delay_ms = float(words[0])
        return int(words[1])

    def _answer(self, word: str) -> list[str]:
        out: IO[str] | None = self.popen.stdout
        assert out is not None
        ready, _, _ = select.select([out], [], [], self.timeout)
        line = out.readline() if ready else ""
        words = line.split()
        if not words or words[0] != word:
            tail = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise BenchError(f"the delay proxy answered {line!r}, not {word!r}:\n{tail}")
        return words[1:]

    def stop(self) -> None:
        """Close its stdin (it then closes its links and exits); kill its group if not."""
        with contextlib.suppress(OSError):
            if self.popen.stdin is not None:
                self.popen.stdin.close()
        try:
            self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGKILL)
            self.popen.wait(timeout=5)
        if self.popen.stdout is not None:
            self.popen.stdout.close()


def children(pid: int) -> list[int]:
    """The pids whose parent is `pid` (a Celery worker's pool processes)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
            except (FileNotFoundError, ProcessLookupError):
                continue
    return found


PINGS = 20
"""`SELECT 1`s a round trip is measured with, through the proxy and directly."""


def _conninfo(database_url: str) -> str:
    return make_url(database_url).set(drivername="postgresql").render_as_string(False)


def _ping_ms(conn: psycopg.Connection[Any], n: int = PINGS) -> float:
    """The median of `n` `SELECT 1` round trips on `conn`, ms."""
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        conn.execute("SELECT 1").fetchone()
        times.append((time.perf_counter() - t0) * 1000.0)
    return median(times)


def _upstream(database_url: str) -> tuple[str, int]:
    url = make_url(database_url)
    return url.host or "127.0.0.1", int(url.port or 5432)


class CpuMeter:
    """CPU seconds of the worker (main and pool processes), the scheduler and the proxy."""

    def __init__(self, env: LiveEnv, proxy: DelayProxy) -> None:
        self.pids: dict[str, list[int]] = {
            "worker": [p for w in env.workers for p in (w.pid, *children(w.pid))],
            "scheduler": [s.pid for s in env.schedulers],
            "proxy": [proxy.pid],
        }

    def read(self) -> dict[str, float]:
        out = {}
        for what, pids in self.pids.items():
            total = 0.0
            for pid in pids:
                with contextlib.suppress(OSError):
                    total += cpu_seconds(pid)
            out[what] = total
        return out

    @staticmethod
    def per_task(before: dict[str, float], after: dict[str, float], tasks: float) -> Result:
        return {
            f"{what}_cpu_ms_per_task": 1000.0 * (after[what] - before[what]) / tasks
            for what in before
        }


def _w1_run(env: LiveEnv, sizes: Sizes, meter: CpuMeter, prefix: str) -> dict[str, float]:
    cpu0 = meter.read()
    pks = env.trigger(DAG_W1, 1, prefix)
    env.wait_runs(pks, sizes.run_timeout)
    cpu1 = meter.read()
    run = throughput(read_tis(env.factory, pks))
    run["run_seconds"] = run_seconds(read_runs(env.factory, pks))
    return {**run, **CpuMeter.per_task(cpu0, cpu1, run["tasks"])}


def _w2_run(env: LiveEnv, sizes: Sizes, meter: CpuMeter, prefix: str) -> tuple[list[float], Result]:
    """One chain: its hops (ms) and the CPU a task over it."""
    cpu0 = meter.read()
    pks = env.trigger(DAG_W2, 1, prefix)
    env.wait_runs(pks, sizes.run_timeout)
    cpu1 = meter.read()
    tis = read_tis(env.factory, pks)
    return chain_hops(tis)["hop"], CpuMeter.per_task(cpu0, cpu1, float(len(tis)))


@dataclass
class Rounds:
    """What the rounds measured, per delay (ms)."""

    delays: list[int]
    w1: dict[int, list[dict[str, float]]] = field(default_factory=dict)
    hops: dict[int, list[float]] = field(default_factory=dict)
    w2_cpu: dict[int, list[Result]] = field(default_factory=dict)
    added_ms: dict[int, list[float]] = field(default_factory=dict)
    """A `SELECT 1`'s round trip through the proxy less one direct, each round."""
    proxied_connections: int = 0

    def __post_init__(self) -> None:
        for table in (self.w1, self.hops, self.w2_cpu, self.added_ms):
            table.update({ms: [] for ms in self.delays})


def measure(env: LiveEnv, sizes: Sizes, chosen: Sequence[str]) -> dict[str, Result]:
    """The latency workloads of `chosen` (names of `LATENCY`) on `env`'s deployment.

    Every worker of `env` is stopped, one is started through a delay proxy, and stopped
    again (with the proxy) at the end: the caller starts a direct worker again if it
    needs one. Each round also times `SELECT 1` through the proxy and directly, for the
    delay the proxy really adds (its timers wake up to a millisecond late).
    """
    want = [n for n in LATENCY if n in chosen]
    delays = [ms for ms in DELAYS_MS if name("W1", ms) in want or name("W2", ms) in want]
    if not delays:
        return {}
    env.stop_workers()
    got = Rounds(delays)
    proxy = DelayProxy(_upstream(env.db.url), env.log_dir / "delay-proxy.log")
    try:
        with (
            psycopg.connect(_conninfo(env.db.url), autocommit=True) as direct,
            psycopg.connect(_conninfo(proxy.url(env.db.url)), autocommit=True) as via,
        ):
            env.worker_env = {"SLUICE_DATABASE_URL": proxy.url(env.db.url)}
            env.start_worker(4)
            meter = CpuMeter(env, proxy)
            # the pool's connections made through the proxy, and the DAG file loaded
            env.wait_runs(env.trigger(DAG_W1, 1, "latency-warmup"), sizes.run_timeout)
            for i in range(sizes.repeats):
                for ms in delays:
                    proxy.set_delay(ms)
                    got.added_ms[ms].append(_ping_ms(via) - _ping_ms(direct))
                    if name("W2", ms) in want:
                        run_hops, cpu = _w2_run(env, sizes, meter, f"w2-{ms}ms-{i}")
                        got.hops[ms] += run_hops
                        got.w2_cpu[ms].append(cpu)
                    if name("W1", ms) in want:
                        got.w1[ms].append(_w1_run(env, sizes, meter, f"w1-{ms}ms-{i}"))
            got.proxied_connections = proxy.set_delay(0)
    finally:
        env.stop_workers()
        env.worker_env = {}
        proxy.stop()
    out: dict[str, Result] = {}
    for ms in delays:
        if name("W2", ms) in want:
            out[name("W2", ms)] = _w2_result(sizes, ms, got)
        if name("W1", ms) in want:
            out[name("W1", ms)] = _w1_result(sizes, ms, got)
    return out


def _cpu_medians(runs: Sequence[Result]) -> dict[str, float]:
    keys = [k for k in runs[0] if k.endswith("_cpu_ms_per_task")] if runs else []
    return {k: median([r[k] for r in runs]) for k in keys}


def _where(ms: int) -> str:
    return f"{ms} ms a round trip between the workers and PostgreSQL (a proxy)"


def _w2_result(sizes: Sizes, ms: int, got: Rounds) -> Result:
    """The pooled hops at `ms`; against the proxy at 0 ms, the extra a hop and the round
    trips it waits for: over the nominal delay, and over the delay the proxy added."""
    hop = summary_ms(got.hops[ms])
    figures: dict[str, float] = {
        "delay_ms": float(ms),
        "added_rtt_ms": median(got.added_ms[ms]),
        "hop_median_ms": hop["median_ms"],
        "hop_p95_ms": hop["p95_ms"],
        "hop_min_ms": hop["min_ms"],
        "hop_max_ms": hop["max_ms"],
        "hops": hop["n"],
        **_cpu_medians(got.w2_cpu[ms]),
        "proxied_connections": float(got.proxied_connections),
    }
    if ms and got.hops.get(0):
        extra = hop["median_ms"] - median(got.hops[0])
        added = figures["added_rtt_ms"] - median(got.added_ms[0])
        figures["extra_ms_per_hop"] = extra
        figures["round_trips_per_hop"] = extra / ms
        if added > 0:
            figures["round_trips_per_hop_measured_delay"] = extra / added
    runs = f" ({sizes.repeats} runs)" if sizes.repeats > 1 else ""
    title = f"W2's chain of {sizes.w2_length} no-op tasks, {_where(ms)}: start(i) − end(i−1){runs}"
    return {"title": title, "figures": figures}


def _w1_result(sizes: Sizes, ms: int, got: Rounds) -> Result:
    runs = got.w1[ms]
    figures = {
        "delay_ms": float(ms),
        "added_rtt_ms": median(got.added_ms[ms]),
        **median_run(runs, "tasks_per_s"),
        **_cpu_medians(runs),
    }
    every: dict[str, list[float]] = {"tasks_per_s": [r["tasks_per_s"] for r in runs]}
    zero = got.w1.get(0) or []
    if ms and len(zero) == len(runs):
        ratios = [r["tasks_per_s"] / z["tasks_per_s"] for r, z in zip(runs, zero, strict=True)]
        figures["ratio_to_0ms_median"] = median(ratios)
        every["ratio_to_0ms"] = ratios
    title = f"W1's fan-out of {fanout_tasks(sizes.w1_width)} tasks, {_where(ms)}"
    if sizes.repeats > 1:
        title += f" (the median of {sizes.repeats})"
    return {"title": title, "figures": figures, "runs": every}
