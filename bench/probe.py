"""`python -m bench.probe`: one workload run again and again on a live deployment, and
where its time goes. For comparing two versions of the code on this noisy VM: run the
probe of each alternately (a checkout's probe runs that checkout's code).

Prints tasks/s over all runs; CPU per task of the worker's main process, its pool
processes, the scheduler, and of the PostgreSQL, Redis and RabbitMQ servers (from /proc:
each server's whole CPU, so run it on a quiet machine; a server the probe does not use
shows what it costs idle); the pool processes' median gap between two tasks and their
claim → result time (from the TIs' own stamps); and how many PostgreSQL backends were
waiting on a lock or idle inside a transaction, on average (sampled from
pg_stat_activity). Uses Redis db 14 and its own database.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import psycopg
from sqlalchemy import text

from bench import history
from bench.dagfiles import chain_call, fanout_call, mapped_call, mapped_tasks, write_dag_file
from bench.live import LiveEnv
from bench.metrics import median
from bench.pg import ADMIN_URL, BenchDb, admin_engine, analyze, new_run_tag
from bench.procs import compile_sources, cpu_seconds
from bench.raw_celery import DEFAULT_BROKER, PairedFloor
from bench.redisguard import cleanup_redis
from sluice.scheduler.core.db import make_engine

DAGS = {"w1": (fanout_call("w1", 200), 1, 202), "w2": (chain_call("w2", 50), 1, 50)}
DAGS["w3"] = (fanout_call("w3", 8), 20, 200)
DAGS["w7"] = (chain_call("w7", 5), 40, 200)
DAGS["w5"] = (fanout_call("w5", 9998), 1, 10000)
DAGS["w11"] = (mapped_call("w11", 1000), 1, mapped_tasks(1000))
"""name → (DAG file call, runs per trigger, tasks per trigger): the bench's W1, W2, W3, W5, W7
and W11 (its live run: 1,000 indexes and their upstream)."""


def workload(dag: str, per_trigger: int | None = None) -> tuple[str, int, int]:
    """`DAGS[dag]` with `per_trigger` runs a trigger instead of its own number, if given:
    (DAG file call, runs per trigger, tasks per trigger)."""
    call, runs, tasks = DAGS[dag]
    if per_trigger is None:
        return call, runs, tasks
    return call, per_trigger, tasks // runs * per_trigger


RAW = "raw"
RAW_DRAIN = 400
"""`--dag raw`: drains of this many no-ops by raw Celery (the bench's floor), no Sluice."""


def machine_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, from /proc/stat."""
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    total = sum(fields[:8])
    return (total - idle) / os.sysconf("SC_CLK_TCK"), total / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
            except (FileNotFoundError, ProcessLookupError):
                continue
    return found


SERVERS = {"PostgreSQL": "postgres", "Redis": "redis-server", "RabbitMQ": "beam.smp"}
"""The servers whose CPU the probe counts: name → what their processes' `comm` holds (the
whole server's, so the machine must be quiet otherwise; a server absent counts 0)."""


def server_cpu(comm: str) -> float:
    """CPU seconds of every process whose name holds `comm` so far."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and comm in (entry / "comm").read_text():
                total += cpu_seconds(int(entry.name))
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total


class Backends(threading.Thread):
    """Samples the bench database's client backends every 2 ms until stopped."""

    def __init__(self, database: str) -> None:
        super().__init__(daemon=True)
        self.database, self.samples, self.counts = database, 0, Counter[str]()
        self.stop = threading.Event()

    def run(self) -> None:
        query = (
            "SELECT state, wait_event_type FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()"
        )
        with psycopg.connect(ADMIN_URL.replace("+psycopg", ""), autocommit=True) as conn:
            while not self.stop.wait(0.002):
                for state, wait in conn.execute(query, (self.database,)):
                    if wait == "Lock":
                        self.counts["waiting on a lock"] += 1
                    elif state == "idle in transaction":
                        self.counts["idle in a transaction"] += 1
                self.samples += 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.probe")
    p.add_argument(
        "--dag",
        choices=[*sorted(DAGS), RAW],
        default="w1",
        help=f"a workload of the bench; {RAW}: raw Celery's drains (the floor), no Sluice",
    )
    p.add_argument("--runs", type=int, default=10, help="triggers, one after another")
    p.add_argument(
        "--per-trigger",
        type=int,
        metavar="N",
        help="runs each trigger creates at once (the workload's own number by default: "
        "20 for w3, 40 for w7, 1 for the others)",
    )
    p.add_argument("--slots", type=int, help="the default pool's slots (128 by default)")
    p.add_argument("--schedulers", type=int, default=1, help="sluice scheduler processes")
    p.add_argument(
        "--concurrency",
        type=int,
        default=4,
        help="the worker's pool processes (4, as the bench; 1 leaves a core free for a profiler)",
    )
    p.add_argument("--backends", action="store_true", help="sample pg_stat_activity (costs CPU)")
    p.add_argument(
        "--broker",
        default="redis://127.0.0.1:6379/14",
        help="the broker URL (default Redis db 14; e.g. amqp://guest:guest@127.0.0.1:5672/VHOST)",
    )
    p.add_argument(
        "--env", action="append", default=[], metavar="NAME=VALUE", help="a setting for all"
    )
    p.add_argument(
        "--history",
        type=int,
        default=0,
        metavar="RUNS",
        help="first load RUNS finished runs of each of 100 20-task DAGs (W12's history)",
    )
    args = p.parse_args(argv)
    if args.per_trigger is not None and args.per_trigger < 1:
        p.error("--per-trigger must be at least 1")
    compile_sources()
    if args.dag == RAW:
        return _raw(args.broker, args.runs)
    call, per_trigger, tasks = workload(args.dag, args.per_trigger)
    tag = new_run_tag()
    db = BenchDb.create(admin_engine(), tag)
    work = Path(tempfile.mkdtemp(prefix=f"sluice-probe-{tag}-"))
    (work / "dags").mkdir()
    write_dag_file(work / "dags" / "probe.py", [call])
    history_dags = []
    if args.history:
        history_dags = [f"{history.HISTORY_PREFIX}{i:03d}" for i in range(100)]
        write_dag_file(
            work / "dags" / "history.py",
            [fanout_call(d, history.HISTORY_WIDTH) for d in history_dags],
        )
    env = LiveEnv(db, args.broker, f"probe-{tag}", work / "dags", work, 1.0)
    env.extra_env = dict(item.split("=", 1) for item in args.env)
    try:
        env.migrate()
        env.sync_dags([args.dag, *history_dags])
        if args.history:
            engine = make_engine(db.url)
            origin = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
            history.load_runs(engine, history.HISTORY_PREFIX + "%", args.history, origin)
            analyze(engine)
            engine.dispose()
        if args.slots:
            with env.factory() as session, session.begin():
                session.execute(text("UPDATE pool SET slots = :n"), {"n": args.slots})
        worker = env.start_worker(args.concurrency)
        schedulers = [env.start_scheduler() for _ in range(args.schedulers)]
        env.wait_runs(env.trigger(args.dag, per_trigger, "warm"), 120)
        procs = {
            "worker main": [worker.pid],
            "pool processes": children(worker.pid),
            "schedulers": [s.pid for s in schedulers],
        }
        backends = Backends(db.name)
        if args.backends:
            backends.start()

        def triggers() -> None:
            for i in range(args.runs):
                env.wait_runs(env.trigger(args.dag, per_trigger, f"probe-{i}"), 120, every=0.01)

        _measured(args.dag, tasks * args.runs, procs, triggers)
        if args.backends:
            backends.stop.set()
            backends.join()
        gaps, busy = _stamps(env)
        print(
            f"  pool process: gap between tasks median {median(gaps):.2f} ms, "
            f"claim → result median {median(busy):.2f} ms"
        )
        hops = _hops(env)
        if hops:
            print(f"  hop (a task's end → the next start in its run): median {median(hops):.2f} ms")
        for what, n in sorted(backends.counts.items()):
            print(f"  backends {what}: {n / max(backends.samples, 1):.2f} on average")
    finally:
        env.stop_all()
        db.drop()
        cleanup_redis(args.broker, env.namespace)  # its queues' and bindings' keys
        shutil.rmtree(work, ignore_errors=True)
    return 0


def _raw(broker: str, runs: int) -> int:
    """The floor's costs for comparison: `runs` drains of `RAW_DRAIN` no-ops by a raw
    Celery worker (`-c 4`, Sluice's worker settings) on `broker`, results in Redis db 15;
    CPU per task as for Sluice's workloads."""
    tag = new_run_tag()
    work = Path(tempfile.mkdtemp(prefix=f"sluice-probe-{tag}-"))
    backend = DEFAULT_BROKER if not broker.startswith("redis") else None
    floor = PairedFloor(broker, f"probe-raw-{tag}", work, RAW_DRAIN, backend_url=backend)
    try:
        procs = {"worker main": [floor.worker.pid], "pool processes": children(floor.worker.pid)}

        def drains() -> None:
            for _ in range(runs):
                floor.drain()

        _measured(RAW, RAW_DRAIN * runs, procs, drains)
    finally:
        floor.close()
        shutil.rmtree(work, ignore_errors=True)
    return 0


def _measured(what: str, total: int, procs: dict[str, list[int]], work: Callable[[], None]) -> None:
    """Run `work` (`total` tasks) and print tasks/s, and the CPU per task of each kind of
    `procs`, of the servers and of the whole machine over it."""
    before = _cpu(procs)  # walks /proc: outside the machine's window, as is the one after
    busy_before, started = machine_busy(), time.monotonic()
    work()
    seconds, busy_after = time.monotonic() - started, machine_busy()
    after = _cpu(procs)
    print(f"{what}: {total} tasks in {seconds:.2f} s = {total / seconds:.0f} tasks/s")
    for name in after:
        print(f"  CPU {name}: {1000 * (after[name] - before[name]) / total:.2f} ms/task")
    used, all_cpu = (b - a for a, b in zip(busy_before, busy_after, strict=True))
    print(
        f"  CPU whole machine: {1000 * used / total:.2f} ms/task, "
        f"{used / seconds:.2f} of {all_cpu / seconds:.2f} cores busy"
    )


def _cpu(procs: dict[str, list[int]]) -> dict[str, float]:
    found = {name: sum(map(cpu_seconds, pids)) for name, pids in procs.items()}
    return found | {name: server_cpu(comm) for name, comm in SERVERS.items()}


def _stamps(env: LiveEnv) -> tuple[list[float], list[float]]:
    """Per pool process: end of a task → start of its next (under 50 ms), start → end."""
    query = text(
        "SELECT pid, start_date, end_date FROM task_instance "
        "WHERE pid IS NOT NULL AND end_date IS NOT NULL ORDER BY pid, start_date"
    )
    with env.factory() as session:
        rows = session.execute(query).all()
    gaps = [
        ms
        for a, b in zip(rows, rows[1:], strict=False)
        if a.pid == b.pid and 0 <= (ms := (b.start_date - a.end_date).total_seconds() * 1000) < 50
    ]
    busy = [(r.end_date - r.start_date).total_seconds() * 1000 for r in rows]
    return gaps, busy


def _hops(env: LiveEnv) -> list[float]:
    """In runs whose tasks ran one after another (a chain): each end → the next start."""
    query = text(
        "SELECT dag_run_id, start_date, end_date FROM task_instance "
        "WHERE start_date IS NOT NULL AND end_date IS NOT NULL ORDER BY dag_run_id, start_date"
    )
    with env.factory() as session:
        rows = session.execute(query).all()
    return [
        ms
        for a, b in zip(rows, rows[1:], strict=False)
        if a.dag_run_id == b.dag_run_id
        and 0 <= (ms := (b.start_date - a.end_date).total_seconds() * 1000) < 1000
    ]


if __name__ == "__main__":
    raise SystemExit(main())
