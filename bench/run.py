"""`python -m bench`: the floor, the live workloads, the in-process ones, standalone; report.

Order: the raw Celery floor (only its worker running), then one live Sluice
deployment for W2, W1 (+W6), W3, W3API and W3B (with a `sluice api` process), W3CLI,
W11, W1 and W2 with the workers' PostgreSQL behind a delaying proxy (W1+2ms …), W7,
W10, W13 (with a `sluice triggerer`) and W5 end to end, then the in-process W4 and W5
pass, then W8, then W9 (the API's reads of a big DAG), then W11's expansion
in-process — so no two parts compete for the CPU. Every database and process the bench
creates is removed at the end, also on errors and Ctrl-C.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import os
import platform
import shutil
import signal
import subprocess
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import celery
import redis
from sqlalchemy.exc import OperationalError

from bench import api_reads, history, inproc, latency, raw_celery, standalone, workloads
from bench.dagfiles import (
    chain_call,
    deferring_call,
    fanout_call,
    held_call,
    mapped_call,
    write_dag_file,
)
from bench.live import LiveEnv
from bench.metrics import median_run, runs_of
from bench.pg import ADMIN_URL, BenchDb, admin_engine, new_run_tag, server_version
from bench.procs import REPO_ROOT, compile_sources
from bench.profiling import Profiler
from bench.redisguard import RedisGuard, cleanup_redis
from bench.report import write_reports
from bench.schedulers_alone import AlonePhases, w7_schedulers_alone
from bench.sizes import (
    DAG_W1,
    DAG_W2,
    DAG_W3,
    DAG_W5,
    DAG_W7,
    DAG_W10,
    DAG_W11,
    DAG_W13,
    DAG_WARMUP,
    FULL,
    LATENCY,
    QUICK,
    WORKLOADS,
    Sizes,
)

REDIS_HOST = os.environ.get("SLUICE_BENCH_REDIS_HOST", "127.0.0.1")
REDIS_PORT = int(os.environ.get("SLUICE_BENCH_REDIS_PORT", "6379"))
SLUICE_REDIS_DB = 14
FLOOR_REDIS_DB = 15
LOOP_INTERVAL = 1.0

FLUSHED = "a Redis db of the bench was flushed by another process during this workload"

LIVE = {"W1", "W2", "W3", "W3API", "W3B", "W3CLI", "W5", "W6", "W7", "W10", "W11", "W13"}
LIVE |= set(LATENCY)
NEEDS_FLOOR = {"W1", "W2", "W3", "W3API", "W3B", "W3CLI", "W5", "W11"}
PAIRED = {"W1", "W2", "W3", "W3API", "W3B", "W3CLI", "W11"}
"""The workloads each of whose runs follows a drain of the floor (`paired_floor`), or for
W2 as many of its round trips as the chain has hops."""
ON_RABBITMQ = {"W1R": "W1", "W2R": "W2", "W3R": "W3"}
"""W1-W3 with RabbitMQ as the broker (a vhost of the bench's), beside raw Celery on it."""
AMQP_HOST = os.environ.get("SLUICE_BENCH_AMQP_HOST", "127.0.0.1")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    p.add_argument("--quick", action="store_true", help="tiny sizes (under a minute)")
    p.add_argument("--only", help="comma-separated workloads, e.g. W1,W2 (default: all)")
    p.add_argument(
        "--out",
        default=str(Path(__file__).resolve().parent),
        help="where RESULTS.md and results.json go (default: bench/)",
    )
    p.add_argument("--profile", metavar="DIR", help="record py-spy profiles into DIR")
    p.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    p.add_argument(
        "--w5-timeout",
        type=float,
        help=f"seconds to let the W5 run go end to end (default {FULL.w5_timeout:g})",
    )
    return p.parse_args(argv)


def selected(only: str | None) -> list[str]:
    if not only:
        return list(WORKLOADS)
    known = {w.upper(): w for w in WORKLOADS}  # W1+2ms as w1+2ms, W1+2MS
    names = [known.get(w.strip().upper(), w.strip()) for w in only.split(",") if w.strip()]
    unknown = [w for w in names if w not in WORKLOADS]
    if unknown:
        raise SystemExit(f"bench: unknown workload(s) {unknown}; choose from {WORKLOADS}")
    return [w for w in WORKLOADS if w in names]


class Bench:
    """One benchmark run: its tag, work directory, results and cleanup."""

    def __init__(self, sizes: Sizes, chosen: list[str], prof: Profiler) -> None:
        self.sizes = sizes
        self.chosen = chosen
        self.prof = prof
        self.tag = new_run_tag()
        self.namespace = f"bench-{self.tag}"
        self.workdir = Path(tempfile.mkdtemp(prefix=f"sluice-bench-{self.tag}-"))
        self.logs = self.workdir / "logs"
        self.logs.mkdir()
        self.admin = admin_engine()
        self.broker_url = f"redis://{REDIS_HOST}:{REDIS_PORT}/{SLUICE_REDIS_DB}"
        self.floor_url = f"redis://{REDIS_HOST}:{REDIS_PORT}/{FLOOR_REDIS_DB}"
        self.guard = RedisGuard([self.broker_url, self.floor_url], self.tag)
        self.results: dict[str, Any] = {
            "mode": sizes.mode,
            "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": machine(),
            "settings": {"loop_interval": LOOP_INTERVAL, "sizes": vars(sizes)},
            "floor": {},
            "workloads": {},
        }

    def attempt(
        self,
        names: list[str],
        step: Callable[[], dict[str, Any]],
        *,
        retry: bool = True,
        uses_redis: bool = True,
    ) -> None:
        """Run `step` (results per workload); on error record it against every name.

        If another process flushed the bench's Redis dbs meanwhile, the step runs once more
        (when `retry`), and figures it still produced so are marked `disturbed`.
        """
        retry = retry and uses_redis
        for again in (False, True):
            t0 = time.monotonic()
            self.guard.arm()
            try:
                produced = step()
            except Exception as exc:
                if retry and not again and not self.guard.intact():
                    print(f"bench: Redis flushed by another process during {names}; again")
                    continue
                text = f"{type(exc).__name__}: {exc}"
                print(f"bench: {'/'.join(names)} failed: {text}")
                traceback.print_exc()
                for name in names:
                    self.results["workloads"].setdefault(name, {})["error"] = text
                return
            if uses_redis and not self.guard.intact():
                if retry and not again:
                    print(f"bench: Redis flushed by another process during {names}; again")
                    continue
                produced = {
                    name: {**entry, "disturbed": FLUSHED} for name, entry in produced.items()
                }
            self.record(produced, time.monotonic() - t0)
            return

    def record(self, produced: dict[str, Any], seconds: float) -> None:
        for name, entry in produced.items():
            if name == "floor":
                self.results["floor"] = entry
            else:
                self.results["workloads"][name] = {
                    **self.results["workloads"].get(name, {}),
                    **entry,
                }
            print(f"bench: {name} ({seconds:.1f}s): {_brief(entry)}", flush=True)

    def run(self) -> None:
        want = set(self.chosen)
        if want & NEEDS_FLOOR:
            self.attempt(["floor"], self.floor)
        live = want & LIVE
        if live:
            self.live(live)
        if want & PAIRED and self.sizes.repeats > 1 and "drains" in self.results.get("floor", {}):
            self.attempt(["floor"], self.floor_after)
        on_rabbitmq = [name for name in self.chosen if name in ON_RABBITMQ]
        if on_rabbitmq:
            self.rabbitmq(on_rabbitmq)
        if "W7" in want:
            self.attempt(["W7"], self.w7_alone)
        if "W4" in want:
            self.attempt(
                ["W4"],
                lambda: {"W4": self.in_own_db("w4", inproc.w4_idle_dags)},
                uses_redis=False,
            )
        if "W5" in want:
            self.attempt(
                ["W5"],
                lambda: {"W5": self.in_own_db("w5", inproc.w5_scheduling_pass)},
                uses_redis=False,
            )
            if self.sizes.w5_end_to_end and "W5" in self.results["workloads"]:
                e2e = self.results.pop("_w5_e2e", None)
                if e2e is not None:
                    self.results["workloads"]["W5"]["end_to_end"] = e2e
        if "W8" in want:
            self.attempt(
                ["W8"],
                lambda: {
                    "W8": standalone.w8_standalone(
                        self.workdir, self.namespace, LOOP_INTERVAL, self.sizes
                    )
                },
                uses_redis=False,
            )
        if "W9" in want:
            self.attempt(
                ["W9"],
                lambda: {"W9": self.in_own_db("w9", api_reads.w9_api_reads)},
                uses_redis=False,
            )
        if "W11" in want:
            self.attempt(["W11"], self.w11_expansion, uses_redis=False)
        if "W12" in want:
            self.attempt(["W12"], self.w12_history)

    def floor(
        self,
        rtt_n: int | None = None,
        repeats: int | None = None,
        broker_url: str | None = None,
    ) -> dict[str, Any]:
        """The floor's drains and round trips on the floor's Redis db, or on `broker_url`
        (RabbitMQ: results in the floor's Redis db)."""
        queue = f"bench-raw-{self.tag}"
        broker = broker_url or self.floor_url
        backend = self.floor_url if broker_url else None
        worker = raw_celery.start_raw_worker(broker, queue, self.logs, backend_url=backend)
        app = raw_celery.create_raw_app(broker, queue, backend)
        s = self.sizes
        try:
            return {
                "floor": raw_celery.measure_floor(
                    app,
                    queue,
                    s.floor_drain,
                    s.floor_rtt if rtt_n is None else rtt_n,
                    s.repeats if repeats is None else repeats,
                )
            }
        finally:
            worker.stop()
            app.close()
            cleanup_redis(broker, queue)

    def paired_floor(self, broker_url: str | None = None) -> raw_celery.PairedFloor | None:
        """The floor's worker beside W1, W3 (W3API, W3B, W3CLI) and W11, for a drain before
        each of their runs, and beside W2, for round trips before each of its chains
        (`raw_celery.PairedFloor`); None (unpaired figures) if it does not start."""
        try:
            return raw_celery.PairedFloor(
                broker_url or self.floor_url,
                f"bench-raw-pairs-{self.tag}",
                self.logs,
                self.sizes.floor_drain,
                backend_url=self.floor_url if broker_url else None,
            )
        except Exception as exc:
            print(f"bench: no paired floor drains: {type(exc).__name__}: {exc}")
            return None

    def floor_after(self) -> dict[str, Any]:
        """More drains of the floor after the live workloads (one fewer than before, for an
        odd count): the floor's drain is the median of drains on both sides of the paired
        workloads (`PAIRED`), so the machine's drift over the run weighs on the floor as
        on them."""
        before = self.results["floor"]
        after = self.floor(rtt_n=0, repeats=self.sizes.repeats - 1)["floor"]
        drains = [*before["drains"], *after["drains"]]
        key = "drain_tasks_per_s"
        return {
            "floor": {
                **before,
                **median_run(drains, key),
                "drains": drains,
                "drain_runs": runs_of(drains, key),
            }
        }

    def live(self, want: set[str], broker_url: str | None = None) -> None:
        """The live workloads of `want` on one deployment: Redis (db 14), or `broker_url`
        (RabbitMQ: W1-W3 only, recorded under their `ON_RABBITMQ` names, paired with a
        floor on the same broker)."""
        broker = broker_url or self.broker_url
        rename = {v: k for k, v in ON_RABBITMQ.items()} if broker_url else {}
        attempt: Callable[..., None] = self._renamed(rename) if rename else self.attempt
        db = BenchDb.create(self.admin, self.tag, "amqp" if broker_url else "")
        folder = self.workdir / ("dags-amqp" if broker_url else "dags")
        logs = self.logs / "amqp" if broker_url else self.logs
        logs.mkdir(exist_ok=True)
        env = LiveEnv(db, broker, self.namespace, folder, logs, LOOP_INTERVAL)
        s = self.sizes
        calls = [
            fanout_call(DAG_WARMUP, 8),
            fanout_call(DAG_W1, s.w1_width),
            chain_call(DAG_W2, s.w2_length),
            fanout_call(DAG_W3, s.w3_width),
            chain_call(DAG_W7, s.w7_length),
            held_call(DAG_W10),
            mapped_call(DAG_W11, s.w11_indexes),
            deferring_call(DAG_W13, s.w13_tis, s.w13_sleep_seconds),
        ]
        expect = [DAG_WARMUP, DAG_W1, DAG_W2, DAG_W3, DAG_W7, DAG_W10, DAG_W11, DAG_W13]
        write_dag_file(folder / "bench_dags.py", calls)
        e2e = "W5" in want and s.w5_end_to_end
        if e2e:
            write_dag_file(folder / "bench_big.py", [fanout_call(DAG_W5, s.w5_tasks - 2)])
            expect.append(DAG_W5)
        try:
            ready = False

            def start() -> dict[str, Any]:
                nonlocal ready
                env.migrate()
                env.sync_dags(expect)
                env.start_worker(4)
                env.start_scheduler()
                workloads.warm_up(env, s)
                ready = True
                return {}

            attempt(sorted(want), start, retry=False)
            if not ready:
                return
            pairs = self.paired_floor(broker_url) if want & PAIRED and s.repeats > 1 else None
            drain = pairs.drain if pairs else None
            try:
                if "W2" in want:
                    rtt = pairs.round_trips if pairs else None
                    attempt(["W2"], lambda: {"W2": workloads.w2_chain(env, s, self.prof, rtt)})
                if want & {"W1", "W6"}:
                    names = sorted(want & {"W1", "W6"})
                    attempt(
                        names,
                        lambda: workloads.w1_and_w6(
                            env, s, self.prof, with_commits="W6" in want, floor_drain=drain
                        ),
                    )
                if "W3" in want:
                    attempt(
                        ["W3"], lambda: {"W3": workloads.w3_many_runs(env, s, self.prof, drain)}
                    )
                if "W3API" in want:
                    attempt(
                        ["W3API"],
                        lambda: {
                            "W3API": workloads.w3_via_api(
                                env, s, self.prof, s.w3_runs, "W3API", drain
                            )
                        },
                    )
                if "W3B" in want:
                    attempt(
                        ["W3B"],
                        lambda: {
                            "W3B": workloads.w3_via_api(env, s, self.prof, s.w3b_runs, "W3B", drain)
                        },
                    )
                env.stop_api()
                if "W3CLI" in want:
                    attempt(
                        ["W3CLI"], lambda: {"W3CLI": workloads.w3_via_cli(env, s, self.prof, drain)}
                    )
                if "W11" in want:
                    attempt(
                        ["W11"], lambda: {"W11": workloads.w11_mapped(env, s, self.prof, drain)}
                    )
            finally:
                if pairs:
                    pairs.close()
            latency_names = sorted(want & set(LATENCY))
            if latency_names:
                attempt(latency_names, lambda: latency.measure(env, s, latency_names))
                after = sorted(want & {"W7", "W10", "W13"} | ({"W5"} if e2e else set()))
                if after:  # a direct worker again, warm, for the workloads that follow
                    attempt(after, lambda: self._direct_worker(env, s), retry=False)
            if "W7" in want:
                attempt(["W7"], lambda: {"W7": workloads.w7_two_schedulers(env, s, self.prof)})
            if "W10" in want:
                attempt(["W10"], lambda: {"W10": workloads.w10_mark(env, s)})
            if "W13" in want:
                attempt(["W13"], lambda: {"W13": workloads.w13_deferred(env, s, self.prof)})
            if e2e:
                try:
                    self.guard.arm()
                    self.results["_w5_e2e"] = workloads.w5_end_to_end(env, s, self.prof)
                    if not self.guard.intact():
                        self.results["_w5_e2e"]["disturbed"] = FLUSHED
                    print(f"bench: W5 end to end: {_brief(self.results['_w5_e2e'])}")
                except Exception as exc:
                    self.results["_w5_e2e"] = {"error": f"{type(exc).__name__}: {exc}"}
        finally:
            env.stop_all()
            db.drop()
            cleanup_redis(broker, self.namespace)

    @staticmethod
    def _direct_worker(env: LiveEnv, sizes: Sizes) -> dict[str, Any]:
        """After the latency workloads (which leave no worker): one worker on the direct
        link again, warmed up, for the live workloads that follow."""
        env.stop_workers()
        env.start_worker(4)
        workloads.warm_up(env, sizes)
        return {}

    def _renamed(self, rename: dict[str, str]) -> Callable[..., None]:
        """`attempt` recording each workload under `rename`'s name for it."""

        def attempt(names: list[str], step: Callable[[], dict[str, Any]], **kw: Any) -> None:
            def renamed() -> dict[str, Any]:
                return {rename.get(k, k): v for k, v in step().items()}

            self.attempt([rename.get(n, n) for n in names], renamed, **kw)

        return attempt

    def rabbitmq(self, names: list[str]) -> None:
        """W1-W3 on RabbitMQ: a vhost of the bench's own, the floor on it (results in the
        floor's Redis db) and one live deployment on it; the vhost deleted after."""
        vhost = f"sluice_bench_{self.tag}"
        try:
            _rabbitmqctl("add_vhost", vhost)
            _rabbitmqctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
        except (OSError, subprocess.SubprocessError) as exc:
            for name in names:
                self.results["workloads"].setdefault(name, {})["error"] = f"RabbitMQ: {exc}"
            return
        amqp = f"amqp://guest:guest@{AMQP_HOST}:5672/{vhost}"
        try:

            def floor() -> dict[str, Any]:
                self.results["floor_amqp"] = self.floor(broker_url=amqp)["floor"]
                return {}

            self.attempt(["floor_amqp"], floor)
            self.live({ON_RABBITMQ[name] for name in names}, broker_url=amqp)
        finally:
            try:
                _rabbitmqctl("delete_vhost", vhost)
            except (OSError, subprocess.SubprocessError) as exc:
                print(f"bench: vhost {vhost} not deleted: {exc}")

    def w7_alone(self) -> dict[str, Any]:
        """The schedulers alone (no worker), merged into W7's figures and runs."""
        phases = AlonePhases(self.admin, self.tag, self.workdir, self.broker_url, self.namespace)
        alone = w7_schedulers_alone(phases, self.sizes)
        entry = self.results["workloads"].get("W7") or {}
        return {
            "W7": {
                **entry,
                "figures": {**(entry.get("figures") or {}), **alone["figures"]},
                "runs": {**(entry.get("runs") or {}), **alone["runs"]},
            }
        }

    def w11_expansion(self) -> dict[str, Any]:
        """The expansion timed in-process, merged into W11's figures (the live run's)."""
        expansion = self.in_own_db("w11", inproc.w11_expansion)
        entry = self.results["workloads"].get("W11") or {}
        titles = [entry.get("title"), expansion["title"]]
        return {
            "W11": {
                **entry,
                "title": "; ".join(t for t in titles if t),
                "figures": {**(entry.get("figures") or {}), **expansion["figures"]},
                "runs": {**(entry.get("runs") or {}), **expansion["runs"]},
            }
        }

    def w12_history(self) -> dict[str, Any]:
        """W12's two phases, each on a database and namespace of its own, measured in
        alternating rounds (`bench.history`)."""
        names = ("empty", "history")
        places: dict[str, history.Place] = {}
        loaded: dict[str, dict[str, float]] = {}
        rounds: dict[str, list[dict[str, float]]] = {name: [] for name in names}
        try:
            for name in names:
                logs = self.logs / f"w12-{name}"
                logs.mkdir(exist_ok=True)
                places[name] = history.Place(
                    BenchDb.create(self.admin, self.tag, f"w12{name[0]}"),
                    self.workdir / f"w12-{name}",
                    logs,
                    self.broker_url,
                    f"{self.namespace}-w12{name[0]}",
                )
                loaded[name] = history.prepare(places[name], self.sizes, history=name == "history")
            for _ in range(self.sizes.repeats):
                for name in names:
                    rounds[name].append(history.measure(places[name], self.sizes, self.prof))
        finally:
            for place in places.values():
                place.db.drop()
                cleanup_redis(self.broker_url, place.namespace)
        phases = {name: history.rounds_merged(loaded[name], rounds[name]) for name in names}
        s = self.sizes
        tis = s.w12_dags * s.w12_runs_per_dag * 20
        title = f"years of history: {tis:,} finished TIs against a young database"
        return {"W12": {"title": title, "figures": history.compare(**phases)}}

    def in_own_db(self, suffix: str, measure: Callable[..., dict[str, Any]]) -> dict[str, Any]:
        db = BenchDb.create(self.admin, self.tag, suffix)
        try:
            return measure(db, self.workdir, self.namespace, self.sizes, self.prof)
        finally:
            db.drop()

    def close(self, keep: bool) -> None:
        self.admin.dispose()
        self.guard.close()
        if keep:
            print(f"bench: work directory kept: {self.workdir}")
        else:
            shutil.rmtree(self.workdir, ignore_errors=True)


def _rabbitmqctl(*args: str) -> None:
    subprocess.run(["rabbitmqctl", "-q", *args], check=True, capture_output=True, timeout=60)


def _brief(entry: dict[str, Any]) -> str:
    figures = entry.get("figures", entry)
    parts = [f"{k}={v:.4g}" for k, v in figures.items() if isinstance(v, int | float)][:6]
    return ", ".join(parts)


def machine() -> dict[str, Any]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info: dict[str, Any] = {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu": cpu,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "celery": celery.__version__,
        "load_start": _load(),
        "git": _git_state(),
    }
    return info


def _git_state() -> str:
    """`<short HEAD>` plus ` (+ uncommitted changes)` when the tree is dirty.

    SLUICE_BENCH_CODE names the code instead (e.g. for a `git archive` export).
    """
    if os.environ.get("SLUICE_BENCH_CODE"):
        return os.environ["SLUICE_BENCH_CODE"]
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO_ROOT
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            cwd=REPO_ROOT,
        ).stdout.strip()
    except OSError:
        return "unknown"
    return f"{head or 'unknown'}{' (+ uncommitted changes)' if dirty else ''}"


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def services_ok(bench: Bench) -> str | None:
    """None if PostgreSQL and Redis answer, else why not."""
    try:
        bench.results["machine"]["postgres"] = server_version(bench.admin)
    except OperationalError as exc:
        return f"PostgreSQL not reachable at {ADMIN_URL}: {exc.orig}"
    try:
        client = redis.Redis.from_url(bench.broker_url)
        bench.results["machine"]["redis"] = client.info("server").get("redis_version", "?")
        client.close()
    except redis.RedisError as exc:
        return f"Redis not reachable at {bench.broker_url}: {exc}"
    return None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    compile_sources()
    sizes = QUICK if args.quick else FULL
    if args.w5_timeout is not None:
        sizes = dataclasses.replace(sizes, w5_timeout=args.w5_timeout)
    chosen = selected(args.only)
    prof = Profiler(Path(args.profile).resolve() if args.profile else None)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    bench = Bench(sizes, chosen, prof)
    started = time.monotonic()
    interrupted = False
    try:
        problem = services_ok(bench)
        if problem:
            print(f"bench: {problem}")
            return 2
        print(f"bench: {sizes.mode} run {bench.tag}: {', '.join(chosen)}; logs in {bench.logs}")
        bench.run()
    except KeyboardInterrupt:
        interrupted = True
        print("bench: interrupted; cleaned up")
    finally:
        bench.close(args.keep)
    bench.results["elapsed_seconds"] = time.monotonic() - started
    bench.results["machine"]["load_end"] = _load()
    if prof.summaries:
        bench.results["profiles"] = prof.summaries
    md, js = write_reports(bench.results, Path(args.out))
    print(f"bench: wrote {md} and {js} in {bench.results['elapsed_seconds']:.0f}s")
    errors = [w for w, e in bench.results["workloads"].items() if e.get("error")]
    if errors:
        print(f"bench: errors in {', '.join(errors)}")
    return 130 if interrupted else (1 if errors else 0)
