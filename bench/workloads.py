"""The live workloads, against real `sluice scheduler` and `sluice worker -c 4` processes.

W1 fan-out (+ W6 commits per task over the same run), W2 chain, W3 many runs (and the
same runs triggered as users do: W3API and W3B through a `sluice api` process's REST API,
W3CLI with `sluice dags trigger` processes), W5 end to end, W7 one scheduler against
two, W10 a mark, W11 a mapped task's indexes. Every figure comes from the database's
timestamps (`bench.metrics`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import http.client
import json
import math
import secrets
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import select, text

from bench.dagfiles import DEFERRING_TASK, MAPPED_TASK, MAPPED_UPSTREAM, fanout_tasks
from bench.live import LiveEnv
from bench.metrics import (
    RunTimes,
    TiTimes,
    chain_hops,
    median,
    median_run,
    read_runs,
    read_tis,
    run_seconds,
    runs_of,
    summary_ms,
    throughput,
)
from bench.procs import REPO_ROOT, BenchError, cpu_seconds, run_cli, sluice_argv, wait_until
from bench.profiling import Profiler
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
    Sizes,
)
from sluice.scheduler.core.models import DagRun

Result = dict[str, Any]


@contextlib.contextmanager
def profiled(prof: Profiler, env: LiveEnv, name: str, *, api: bool = False) -> Iterator[None]:
    """Sample the first scheduler (focused on its tick) and the first worker with children;
    with `api`, the API process too (focused on its trigger route)."""
    with contextlib.ExitStack() as stack:
        if prof.enabled and api and env.api is not None:
            stack.enter_context(
                prof.record(f"{name}-api", env.api.pid, focus=(None, "trigger_run"))
            )
        if prof.enabled and env.schedulers and env.workers:
            stack.enter_context(
                prof.record(f"{name}-scheduler", env.schedulers[0].pid, focus=(None, "tick"))
            )
            stack.enter_context(
                prof.record(
                    f"{name}-worker",
                    env.workers[0].pid,
                    subprocesses=True,
                    focus=("run_task_instance",),
                )
            )
        yield


def warm_up(env: LiveEnv, sizes: Sizes) -> None:
    """One small fan-out, so every pool child has its connections and the DAG file loaded."""
    env.wait_runs(env.trigger(DAG_WARMUP, 1, "warmup"), sizes.run_timeout)


def w1_and_w6(
    env: LiveEnv,
    sizes: Sizes,
    prof: Profiler,
    *,
    with_commits: bool,
    floor_drain: Callable[[], float] | None = None,
) -> dict[str, Result]:
    """W1 fan-out; W6 counts the database's commits over the same run, less an idle baseline.
    With `floor_drain`, each W1 run follows a drain of the floor (`paired`)."""
    tasks = fanout_tasks(sizes.w1_width)
    if with_commits:
        time.sleep(sizes.w6_settle)
    drain = floor_drain() if floor_drain else None  # Redis only: W6 counts no commit of it
    c0 = env.db.xact_commit()
    t0 = time.monotonic()
    with profiled(prof, env, "W1"):
        first = paired(_w1_run(env, sizes, "w1"), drain)
    out: dict[str, Result] = {}
    if with_commits:  # before the repeats: the idle baseline follows this run alone
        time.sleep(sizes.w6_settle)
        c1 = env.db.xact_commit()
        window = time.monotonic() - t0
        time.sleep(window)  # the same duration with everything idle
        c2 = env.db.xact_commit()
        busy, idle = c1 - c0, c2 - c1
        out["W6"] = {
            "title": f"database commits per task over W1 ({tasks} tasks), idle baseline subtracted",
            "figures": {
                "commits_per_task": (busy - idle) / tasks,
                "commits_during_w1": float(busy),
                "idle_commits_same_duration": float(idle),
                "window_seconds": window,
                "tasks": float(tasks),
            },
        }
    more = []
    for i in range(1, sizes.repeats):
        drain = floor_drain() if floor_drain else None
        more.append(paired(_w1_run(env, sizes, f"w1-{i}"), drain))
    title = f"fan-out: start → {sizes.w1_width} parallel → join, one run"
    if sizes.repeats > 1:
        title += f" (the median of {sizes.repeats})"
    out["W1"] = {"title": title, **with_pairs([first, *more], "tasks_per_s")}
    return out


def paired(run: dict[str, float], drain: float | None) -> dict[str, float]:
    """`run` with the floor's drain made just before it and their ratio, if one was."""
    if drain is None:
        return run
    return {**run, "paired_floor_drain": drain, "paired_ratio": run["tasks_per_s"] / drain}


def with_pairs(every: list[dict[str, float]], key: str) -> dict[str, Any]:
    """The median run's figures and every run's `key`; with pairs (`paired`), the median
    of the ratios and of the drains too."""
    figures = median_run(every, key)
    runs = runs_of(every, key)
    if all("paired_ratio" in run for run in every):
        ratios = [run["paired_ratio"] for run in every]
        drains = [run["paired_floor_drain"] for run in every]
        figures = {
            **figures,
            "paired_ratio_median": median(ratios),
            "paired_floor_drain_median": median(drains),
        }
        runs = {**runs, "paired_ratio": ratios, "paired_floor_drain": drains}
    return {"figures": figures, "runs": runs}


def _w1_run(env: LiveEnv, sizes: Sizes, prefix: str) -> dict[str, float]:
    pks = env.trigger(DAG_W1, 1, prefix)
    env.wait_runs(pks, sizes.run_timeout)
    runs = read_runs(env.factory, pks)
    return {**throughput(read_tis(env.factory, pks)), "run_seconds": run_seconds(runs)}


def w2_chain(
    env: LiveEnv,
    sizes: Sizes,
    prof: Profiler,
    floor_rtt: Callable[[int], dict[str, float]] | None = None,
) -> Result:
    """`repeats` runs of the chain, one after another; the hops of all of them pooled. With
    `floor_rtt`, each run follows as many round trips of the floor as it has hops: each
    run's hop median and p95 over theirs (`paired_hop_ratio`, `paired_hop_p95_ratio`), and
    the medians of those ratios, as W1's runs are paired with drains."""
    tis: list[TiTimes] = []
    pairs: list[dict[str, float]] = []
    with profiled(prof, env, "W2"):
        for i in range(sizes.repeats):
            rtt = floor_rtt(sizes.w2_length - 1) if floor_rtt else None
            run = env.trigger(DAG_W2, 1, f"w2-{i}")
            env.wait_runs(run, sizes.run_timeout)
            run_tis = read_tis(env.factory, run)
            tis += run_tis
            if rtt is not None:
                pairs.append(_hop_pair(summary_ms(chain_hops(run_tis)["hop"]), rtt))
    hops = chain_hops(tis)
    hop = summary_ms(hops["hop"])
    runs = f" ({sizes.repeats} runs)" if sizes.repeats > 1 else ""
    figures = {
        "hop_median_ms": hop["median_ms"],
        "hop_p95_ms": hop["p95_ms"],
        "hop_min_ms": hop["min_ms"],
        "hop_max_ms": hop["max_ms"],
        "hops": hop["n"],
        "end_to_scheduled_median_ms": summary_ms(hops["to_scheduled"])["median_ms"],
        "scheduled_to_start_median_ms": summary_ms(hops["scheduled_to_start"])["median_ms"],
    }
    result: Result = {
        "title": f"chain of {sizes.w2_length} no-op tasks: start(i) − end(i−1){runs}",
        "figures": figures,
    }
    if pairs:
        figures.update({f"{k}_median": median([p[k] for p in pairs]) for k in pairs[0]})
        result["runs"] = {k: [p[k] for p in pairs] for k in pairs[0]}
    return result


def _hop_pair(own: dict[str, float], rtt: dict[str, float]) -> dict[str, float]:
    """One chain run's hops against the floor's round trips made just before it."""
    return {
        "paired_rtt_ms": rtt["median_ms"],
        "paired_rtt_p95_ms": rtt["p95_ms"],
        "paired_hop_ratio": own["median_ms"] / rtt["median_ms"],
        "paired_hop_p95_ratio": own["p95_ms"] / rtt["p95_ms"],
    }


def w3_many_runs(
    env: LiveEnv, sizes: Sizes, prof: Profiler, floor_drain: Callable[[], float] | None = None
) -> Result:
    """`repeats` batches of runs, one after another; the median batch. With `floor_drain`,
    each batch follows a drain of the floor (`paired`)."""
    batches: list[dict[str, float]] = []
    with profiled(prof, env, "W3"):
        for i in range(sizes.repeats):
            drain = floor_drain() if floor_drain else None
            sent = time.time()
            pks = env.trigger(DAG_W3, sizes.w3_runs, f"w3-{i}")
            env.wait_runs(pks, sizes.run_timeout)
            runs = read_runs(env.factory, pks)
            tis = read_tis(env.factory, pks)
            batch = {
                **throughput(tis),
                "runs_seconds": run_seconds(runs),
                "trigger_to_end_seconds": _last_end(runs) - sent,
            }
            batch["trigger_to_end_tasks_per_s"] = batch["tasks"] / batch["trigger_to_end_seconds"]
            batches.append(paired(batch, drain))
    title = f"{sizes.w3_runs} runs at once of a {fanout_tasks(sizes.w3_width)}-task diamond"
    if sizes.repeats > 1:
        title += f" (the median of {sizes.repeats} batches)"
    return {"title": title, **with_pairs(batches, "tasks_per_s")}


def w3_via_api(
    env: LiveEnv,
    sizes: Sizes,
    prof: Profiler,
    runs: int,
    name: str,
    floor_drain: Callable[[], float] | None = None,
) -> Result:
    """W3's DAG, `runs` runs posted to `POST /api/v1/dags/{dag_id}/runs` of the `sluice api`
    process from `api_threads` threads at once, `repeats` batches one after another; the
    median batch. tasks/s from the first request sent to the last run's end; the API
    process's CPU a trigger (/proc, 10 ms ticks: read over the whole batch)."""
    api = env.api if env.api is not None else env.start_api(secrets.token_urlsafe(24))
    batches: list[dict[str, float]] = []
    with profiled(prof, env, name, api=True):
        for i in range(sizes.repeats):
            drain = floor_drain() if floor_drain else None
            run_ids = [f"{name.lower()}-{i}-{k:04d}" for k in range(runs)]
            api_cpu = cpu_seconds(api.pid)
            sent, latencies = _post_runs(env, run_ids, sizes.api_threads)
            api_cpu = cpu_seconds(api.pid) - api_cpu  # the triggers' (the API idles after)
            batch = _triggered_batch(env, sizes, run_ids, sent, latencies)
            batch["api_cpu_ms_per_trigger"] = 1000.0 * api_cpu / runs
            batches.append(paired(batch, drain))
    threads = min(sizes.api_threads, runs)
    title = (
        f"{runs} runs of W3's {fanout_tasks(sizes.w3_width)}-task diamond posted to the REST "
        f"API from {threads} threads at once"
    )
    if sizes.repeats > 1:
        title += f" (the median of {sizes.repeats} batches)"
    return {"title": title, **with_pairs(batches, "tasks_per_s")}


def w3_via_cli(
    env: LiveEnv, sizes: Sizes, prof: Profiler, floor_drain: Callable[[], float] | None = None
) -> Result:
    """W3's runs, each triggered by a `sluice dags trigger DAG --run-id R` process, all
    started at once; `repeats` batches, the median. tasks/s from the first process started
    to the last run's end; `trigger_*`: each process's start → exit."""
    batches: list[dict[str, float]] = []
    with profiled(prof, env, "W3CLI"):
        for i in range(sizes.repeats):
            drain = floor_drain() if floor_drain else None
            run_ids = [f"w3cli-{i}-{k:04d}" for k in range(sizes.w3_runs)]
            sent, latencies = _cli_triggers(env, run_ids, prof, f"W3CLI-cli-{i}")
            batches.append(paired(_triggered_batch(env, sizes, run_ids, sent, latencies), drain))
    title = (
        f"{sizes.w3_runs} runs of W3's {fanout_tasks(sizes.w3_width)}-task diamond, each by a "
        "`sluice dags trigger` process, started at once"
    )
    if sizes.repeats > 1:
        title += f" (the median of {sizes.repeats} batches)"
    return {"title": title, **with_pairs(batches, "tasks_per_s")}


def _post_runs(env: LiveEnv, run_ids: list[str], threads: int) -> tuple[float, list[float]]:
    """POST a run for each of `run_ids` from `threads` threads, each with its own
    connection (opened first), released together; (when the first request was sent, by
    the wall clock; each request's sent → response, ms)."""
    threads = max(1, min(threads, len(run_ids)))
    chunks = [run_ids[t::threads] for t in range(threads)]
    path = f"/api/v1/dags/{DAG_W3}/runs"
    headers = {"Authorization": f"Bearer {env.api_token}", "Content-Type": "application/json"}
    barrier = threading.Barrier(threads)
    sent: list[float] = []
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()

    def post(chunk: list[str]) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", env.api_port, timeout=120)
        try:
            conn.connect()
            barrier.wait(timeout=60)
            for run_id in chunk:
                body = json.dumps({"run_id": run_id})
                wall, t0 = time.time(), time.perf_counter()
                conn.request("POST", path, body, headers)
                response = conn.getresponse()
                text = response.read()
                ms = (time.perf_counter() - t0) * 1000.0
                with lock:
                    sent.append(wall)
                    latencies.append(ms)
                    if response.status != 201:
                        errors.append(f"{run_id}: {response.status} {text[:300]!r}")
        except Exception as exc:
            with lock:
                errors.append(f"{type(exc).__name__}: {exc}")
            barrier.abort()
        finally:
            conn.close()

    workers = [threading.Thread(target=post, args=(c,), daemon=True) for c in chunks]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    if errors:
        raise BenchError(f"{len(errors)} trigger(s) failed: {errors[:3]}")
    return min(sent), latencies


def _cli_triggers(
    env: LiveEnv, run_ids: list[str], prof: Profiler, profile_name: str
) -> tuple[float, list[float]]:
    """One `sluice dags trigger` process per run id, all started at once (the first under
    py-spy when profiling); (when the first was started, wall clock; each one's start →
    exit, ms)."""
    base = [*sluice_argv(), "dags", "trigger", DAG_W3]
    procs: list[tuple[subprocess.Popen[bytes], float, Path]] = []
    sent = time.time()
    try:
        for k, run_id in enumerate(run_ids):
            argv = [*base, "--run-id", run_id]
            if k == 0:
                argv = prof.command(profile_name, argv)
            log = env.log_dir / f"{run_id}.log"
            with open(log, "wb") as out:
                proc = subprocess.Popen(
                    argv,
                    env=env.env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    cwd=str(REPO_ROOT),
                )
            procs.append((proc, time.perf_counter(), log))
        latencies: dict[int, float] = {}
        deadline = time.monotonic() + 120
        while len(latencies) < len(procs):
            for k, (proc, t0, _) in enumerate(procs):
                if k not in latencies and proc.poll() is not None:
                    latencies[k] = (time.perf_counter() - t0) * 1000.0
            if time.monotonic() > deadline:
                raise BenchError(f"{len(procs) - len(latencies)} `sluice dags trigger` unfinished")
            time.sleep(0.005)
    finally:
        for proc, _, _ in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    failed = [log.read_text(errors="replace")[-1500:] for p, _, log in procs if p.returncode]
    if failed:
        raise BenchError(f"{len(failed)} `sluice dags trigger` failed:\n{failed[0]}")
    prof.collect(profile_name, focus=(None, "trigger"))
    return sent, [latencies[k] for k in range(len(procs))]


def _triggered_batch(
    env: LiveEnv, sizes: Sizes, run_ids: list[str], sent: float, latencies: list[float]
) -> dict[str, float]:
    """Wait for the runs named `run_ids` (W3's DAG); their figures: tasks/s from `sent`
    (wall clock, the first trigger) to the last run's end, W3's own (first task's start
    → last task's end), queued → start of the TIs and of the runs, the triggers' latency."""
    with env.factory() as session:
        pks = list(
            session.scalars(
                select(DagRun.id).where(DagRun.dag_id == DAG_W3, DagRun.run_id.in_(run_ids))
            )
        )
    if len(pks) != len(run_ids):
        raise BenchError(f"{len(run_ids)} runs triggered, {len(pks)} found")
    env.wait_runs(pks, sizes.run_timeout)
    runs = read_runs(env.factory, pks)
    tis = read_tis(env.factory, pks)
    own = throughput(tis)
    seconds = _last_end(runs) - sent
    queued = summary_ms([_ms_between(t.queued_at, t.start) for t in tis if t.queued_at and t.start])
    run_start = summary_ms(
        [_ms_between(r.queued_at, r.start) for r in runs if r.queued_at and r.start]
    )
    latency = summary_ms(latencies)
    first_created = min(r.queued_at for r in runs if r.queued_at is not None).timestamp()
    last_created = max(r.queued_at for r in runs if r.queued_at is not None).timestamp()
    return {
        "tasks": own["tasks"],
        "runs": float(len(runs)),
        "trigger_to_end_seconds": seconds,
        "tasks_per_s": own["tasks"] / seconds if seconds > 0 else math.nan,
        "ti_span_seconds": own["seconds"],
        "ti_span_tasks_per_s": own["tasks_per_s"],
        "runs_seconds": run_seconds(runs),
        "slots_busy_mean": own["slots_busy_mean"],
        "queued_to_start_median_ms": queued["median_ms"],
        "queued_to_start_p95_ms": queued["p95_ms"],
        "run_queued_to_start_median_ms": run_start["median_ms"],
        "run_queued_to_start_p95_ms": run_start["p95_ms"],
        "trigger_median_ms": latency["median_ms"],
        "trigger_p95_ms": latency["p95_ms"],
        "trigger_max_ms": latency["max_ms"],
        "sent_to_first_run_created_ms": (first_created - sent) * 1000.0,
        "runs_created_window_ms": (last_created - first_created) * 1000.0,
        "sent_to_first_task_start_ms": _ms_since(sent, min(t.start for t in tis if t.start)),
    }


def _last_end(runs: list[RunTimes]) -> float:
    """The last run's end (epoch seconds)."""
    ends = [r.end for r in runs if r.end is not None]
    if not ends:
        raise BenchError("no run has ended")
    return max(ends).timestamp()


def _ms_since(epoch: float, at: dt.datetime) -> float:
    return (at.timestamp() - epoch) * 1000.0


def w11_mapped(
    env: LiveEnv, sizes: Sizes, prof: Profiler, floor_drain: Callable[[], float] | None = None
) -> Result:
    """`repeats` runs of items() >> noop.expand(x=items()), one after another; the median
    run. Throughput over the indexes alone (first index's start → last index's end).
    With `floor_drain`, each run follows a drain of the floor (`paired`)."""
    every: list[dict[str, float]] = []
    with profiled(prof, env, "W11"):
        for i in range(sizes.repeats):
            drain = floor_drain() if floor_drain else None
            every.append(paired(_w11_run(env, sizes, f"w11-{i}"), drain))
    title = f"one run mapping {sizes.w11_indexes} no-op indexes over an upstream's output"
    if sizes.repeats > 1:
        title += f" (the median of {sizes.repeats})"
    return {"title": title, **with_pairs(every, "tasks_per_s")}


def _w11_run(env: LiveEnv, sizes: Sizes, prefix: str) -> dict[str, float]:
    pks = env.trigger(DAG_W11, 1, prefix)
    env.wait_runs(pks, sizes.run_timeout)
    tis = read_tis(env.factory, pks)
    indexes = [t for t in tis if t.task_id == MAPPED_TASK]
    upstream = [t for t in tis if t.task_id == MAPPED_UPSTREAM]
    if len(indexes) != sizes.w11_indexes or len(upstream) != 1:
        raise BenchError(
            f"expected 1 {MAPPED_UPSTREAM} and {sizes.w11_indexes} {MAPPED_TASK} indexes, "
            f"found {len(upstream)} and {len(indexes)}"
        )
    return {
        **throughput(indexes),
        **_expansion_and_batches(upstream[0], indexes),
        "run_seconds": run_seconds(read_runs(env.factory, pks)),
    }


def _expansion_and_batches(upstream: TiTimes, indexes: list[TiTimes]) -> dict[str, float]:
    """Where a mapped run's time goes, from the TIs' stamps: the upstream's end → the
    expansion (the indexes' `scheduled_at`, the pass's clock) → the first index's start;
    and the queueing batches (indexes sharing a `queued_at`: one scheduling pass each)."""
    scheduled = [t.scheduled_at for t in indexes if t.scheduled_at is not None]
    starts = [t.start for t in indexes if t.start is not None]
    batches = Counter(t.queued_at for t in indexes if t.queued_at is not None)
    out = {
        "queue_batches": float(len(batches)),
        "indexes_per_batch_median": median(list(batches.values())),
        "indexes_per_batch_max": float(max(batches.values(), default=0)),
    }
    if upstream.end is not None and scheduled and starts:
        out["upstream_end_to_expansion_ms"] = _ms_between(upstream.end, min(scheduled))
        out["upstream_end_to_first_start_ms"] = _ms_between(upstream.end, min(starts))
    return out


def _ms_between(a: dt.datetime, b: dt.datetime) -> float:
    return (b - a).total_seconds() * 1000.0


def w5_end_to_end(env: LiveEnv, sizes: Sizes, prof: Profiler) -> Result:
    """One run of the big DAG with the real workers; partial figures if it times out."""
    timed_out = False
    with profiled(prof, env, "W5e2e"):
        pks = env.trigger(DAG_W5, 1, "w5")
        try:
            env.wait_runs(pks, sizes.w5_timeout, every=0.5)
        except BenchError:
            if env.finished(pks)[1]:
                raise
            timed_out = True
    tis = read_tis(env.factory, pks)
    figures = throughput(tis)
    runs = read_runs(env.factory, pks)
    figures["run_seconds"] = math.nan if timed_out else run_seconds(runs)
    figures["timed_out"] = float(timed_out)
    return {"title": f"one run of a {sizes.w5_tasks}-task DAG, real workers", "figures": figures}


def w7_phase(env: LiveEnv, sizes: Sizes, prof: Profiler, label: str) -> dict[str, float]:
    with profiled(prof, env, label):
        pks = env.trigger(DAG_W7, sizes.w7_runs, label)
        env.wait_runs(pks, sizes.run_timeout)
    return throughput(read_tis(env.factory, pks))


def w7_two_schedulers(env: LiveEnv, sizes: Sizes, prof: Profiler) -> Result:
    """Phases in A-B-B-A order (one, two, two, one scheduler) so that drift in the
    machine's load cancels out; each side's figure is the mean of its two phases."""
    one = [w7_phase(env, sizes, prof, "W7-one")]
    second = env.start_scheduler()
    try:
        two = [w7_phase(env, sizes, prof, "W7-two"), w7_phase(env, sizes, prof, "W7-two-b")]
    finally:
        env.stop_scheduler(second)
    one.append(w7_phase(env, sizes, prof, "W7-one-b"))
    one_rate = sum(p["tasks_per_s"] for p in one) / len(one)
    two_rate = sum(p["tasks_per_s"] for p in two) / len(two)
    return {
        "title": f"{sizes.w7_runs} runs of a {sizes.w7_length}-task chain: 2 schedulers vs 1",
        "figures": {
            "one_scheduler_tasks_per_s": one_rate,
            "two_schedulers_tasks_per_s": two_rate,
            "ratio": two_rate / one_rate,
            "tasks_per_phase": one[0]["tasks"],
            "one_scheduler_phases_tasks_per_s_min": min(p["tasks_per_s"] for p in one),
            "one_scheduler_phases_tasks_per_s_max": max(p["tasks_per_s"] for p in one),
            "two_schedulers_phases_tasks_per_s_min": min(p["tasks_per_s"] for p in two),
            "two_schedulers_phases_tasks_per_s_max": max(p["tasks_per_s"] for p in two),
        },
    }


def w10_mark(env: LiveEnv, sizes: Sizes) -> Result:
    """`w10_marks` runs of first >> hold >> after, one at a time: while `hold` runs, a user
    marks it success with `sluice tasks mark` (a process, as a user runs it); from the mark
    (its audit event, written in the mark's transaction) to the start of `after`."""
    gaps: list[float] = []
    cli: list[float] = []
    for i in range(sizes.w10_marks):
        [pk] = env.trigger(DAG_W10, 1, f"w10-{i}")
        run_id = _run_id(env, pk)
        wait_until(_running(env, pk, "hold"), sizes.run_timeout, "hold runs")
        t0 = time.monotonic()
        argv = [*sluice_argv(), "tasks", "mark", DAG_W10, run_id, "hold", "--state", "success"]
        run_cli(argv, env.env, timeout=60)
        cli.append(time.monotonic() - t0)
        env.wait_runs([pk], sizes.run_timeout)
        gaps.append(_mark_to_start_ms(env, pk))
    gap = summary_ms(gaps)
    return {
        "title": f"mark a running task success ({sizes.w10_marks} runs): its downstream's start",
        "figures": {
            "mark_to_start_median_ms": gap["median_ms"],
            "mark_to_start_max_ms": gap["max_ms"],
            "cli_seconds_median": round(median(cli), 3),
            "marks": len(gaps),
        },
        "runs": {"mark_to_start_ms": [round(g, 2) for g in gaps]},
    }


def _run_id(env: LiveEnv, pk: int) -> str:
    with env.factory() as session:
        return str(session.scalar(text("SELECT run_id FROM dag_run WHERE id = :pk"), {"pk": pk}))


def _running(env: LiveEnv, pk: int, task_id: str) -> Callable[[], bool]:
    return lambda: _state(env, pk, task_id) == "running"


def _state(env: LiveEnv, pk: int, task_id: str) -> str | None:
    with env.factory() as session:
        return session.scalar(
            text("SELECT state FROM task_instance WHERE dag_run_id = :pk AND task_id = :t"),
            {"pk": pk, "t": task_id},
        )


def _mark_to_start_ms(env: LiveEnv, pk: int) -> float:
    """From the mark of `hold` (its audit event) to the start of `after`, in ms."""
    with env.factory() as session:
        row = session.execute(
            text(
                "SELECT e.at, ti.start_date FROM audit_log e "
                "JOIN dag_run r ON r.run_id = e.run_id AND r.dag_id = e.dag_id "
                "JOIN task_instance ti ON ti.dag_run_id = r.id AND ti.task_id = 'after' "
                "WHERE r.id = :pk AND e.task_id = 'hold'"
            ),
            {"pk": pk},
        ).one()
    return (row.start_date - row.at).total_seconds() * 1000.0


def w13_deferred(env: LiveEnv, sizes: Sizes, prof: Profiler) -> Result:
    """One run of items() >> wait.expand(i=items()) with `w13_tis` indexes, each deferring
    on `Sleep(w13_sleep_seconds)` on its first try, resumed by one `sluice triggerer`
    started for it (and stopped after). Lateness per TI: its resume (`scheduled_at`,
    stamped as the triggerer moves it deferred → scheduled) after its trigger's due time
    (the event in its `waiting`). The triggerer's CPU from just before the run's trigger
    to the last resume, and its peak RSS then."""
    n = sizes.w13_tis
    proc = env.start_triggerer()
    try:
        with profiled(prof, env, "W13"):
            cpu0 = cpu_seconds(proc.pid)
            [pk] = env.trigger(DAG_W13, 1, "w13")
            wait_until(
                lambda: _resumed(env, pk) >= n,
                sizes.run_timeout + sizes.w13_sleep_seconds,
                f"{n} deferred TIs to resume",
                proc,
                every=0.1,
            )
            cpu = cpu_seconds(proc.pid) - cpu0
            rss = _rss_mb(proc.pid)
            env.wait_runs([pk], sizes.run_timeout)
    finally:
        env.stop_triggerer(proc)
    late = _resume_lateness_ms(env, pk)
    if len(late) != n:
        raise BenchError(f"expected {n} resumed {DEFERRING_TASK} TIs, found {len(late)}")
    gap = summary_ms(late)
    seconds = f"{sizes.w13_sleep_seconds:g}"
    return {
        "title": f"{n:,} mapped TIs deferred on Sleep({seconds} s): their resumes' lateness",
        "figures": {
            "resume_late_median_ms": round(gap["median_ms"], 2),
            "resume_late_p95_ms": round(gap["p95_ms"], 2),
            "resume_late_max_ms": round(gap["max_ms"], 2),
            "tis": len(late),
            "triggerer_cpu_seconds": round(cpu, 3),
            "triggerer_rss_mb": round(rss, 1),
        },
    }


def _resumed(env: LiveEnv, pk: int) -> int:
    """TIs of W13's run the triggerer resumed (their `waiting` holds the trigger's event)."""
    with env.factory() as session:
        return int(
            session.scalar(
                text(
                    "SELECT count(*) FROM task_instance WHERE dag_run_id = :pk "
                    "AND task_id = :t AND waiting -> 'event' IS NOT NULL"
                ),
                {"pk": pk, "t": DEFERRING_TASK},
            )
            or 0
        )


def _resume_lateness_ms(env: LiveEnv, pk: int) -> list[float]:
    """Per resumed TI of W13's run: its resume (`scheduled_at`) minus its due time, ms."""
    with env.factory() as session:
        rows = session.execute(
            text(
                "SELECT scheduled_at, waiting -> 'event' ->> 'due' AS due FROM task_instance "
                "WHERE dag_run_id = :pk AND task_id = :t AND waiting -> 'event' IS NOT NULL"
            ),
            {"pk": pk, "t": DEFERRING_TASK},
        ).all()
    return [
        _ms_between(_utc(dt.datetime.fromisoformat(row.due)), _utc(row.scheduled_at))
        for row in rows
        if row.due is not None and row.scheduled_at is not None
    ]


def _utc(at: dt.datetime) -> dt.datetime:
    """`at` with its time zone; a naive one is taken as UTC (the database's clock)."""
    return at if at.tzinfo is not None else at.replace(tzinfo=dt.UTC)


def _rss_mb(pid: int) -> float:
    """Peak resident memory of `pid` (VmHWM, else VmRSS), MB."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    value = fields.get("VmHWM") or fields.get("VmRSS") or "0 kB"
    return int(value.split()[0]) / 1024.0
