"""In-process workloads: the scheduler's own code timed against a bench database.

W4 times `SchedulerJob.tick()` with 10, 100 and 1,000 idle DAGs; W5 times one
scheduling pass (`scheduling_pass`: examine the runs and queue what is ready) over a
10,000-task run; W11 times the `update_state` transaction that expands a mapped task
over an upstream's 10,000 items.
Publishing only collects the messages: no broker, no worker.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session, sessionmaker

from bench.dagfiles import MAPPED_TASK, fanout_call, idle_call, mapped_call, write_dag_file
from bench.metrics import median, percentile, runs_of
from bench.pg import BenchDb
from bench.procs import BenchError
from bench.profiling import Profiler
from bench.sizes import DAG_W5, DAG_W11_EXPAND, Sizes
from sluice.broker.wakeup import LocalWaker
from sluice.scheduler.core.db import make_engine, make_session_factory, transaction, utcnow
from sluice.scheduler.core.messages import RunMessage
from sluice.scheduler.core.migrate import upgrade
from sluice.scheduler.core.models import Dag, TaskInstance
from sluice.scheduler.core.queries.runs import claim_runs_to_examine
from sluice.scheduler.core.settings import Settings
from sluice.scheduler.core.states import TI, RunType
from sluice.scheduler.core.transitions import move_ti
from sluice.scheduler.jobs.scheduler_job import SchedulerJob
from sluice.scheduler.jobs.tick import TickResult
from sluice.scheduler.scheduling.cancelling import cancel_runs
from sluice.scheduler.scheduling.dagrun import create_dagrun, update_state

Result = dict[str, Any]
WARM_TICKS = 3


def wake(waker: Any, run_pk: int | None = None) -> None:
    """Tell the in-process job about news, as a worker's wake-up would (either waker API:
    `wake()` or `wake(run_id)`)."""
    try:
        waker.wake(run_pk)
    except TypeError:
        waker.wake()


@contextmanager
def scheduler_job(
    db: BenchDb, folder: Path, namespace: str, sent: list[RunMessage]
) -> Iterator[tuple[SchedulerJob, sessionmaker[Session]]]:
    """A registered SchedulerJob on `db` and `folder` whose publish collects into `sent`."""
    engine: Engine = make_engine(db.url, application_name="sluice-bench-inproc")
    try:
        upgrade(engine)
        factory = make_session_factory(engine)
        settings = Settings(
            database_url=db.url,
            dags_folder=folder,
            namespace=namespace,
            dag_refresh_interval=0.5,
            parse_timeout=120.0,  # the big DAGs' files: one parse may take a minute
            heartbeat_timeout=180.0,  # above the parse timeout, as the settings require
        )
        job = SchedulerJob(settings, factory, sent.extend, LocalWaker())
        job.register()
        yield job, factory
    finally:
        engine.dispose()


def active_dags(factory: sessionmaker[Session]) -> int:
    with factory() as session:
        return int(session.scalar(select(func.count()).where(Dag.is_active.is_(True))) or 0)


def w4_idle_dags(
    db: BenchDb, workdir: Path, namespace: str, sizes: Sizes, prof: Profiler
) -> Result:
    """Median tick time after each step up in the number of idle DAGs."""
    folder = workdir / "w4_dags"
    figures: dict[str, float] = {}
    with scheduler_job(db, folder, namespace, []) as (job, factory):
        have = 0
        for n in sizes.w4_dags:
            write_dag_file(folder / f"idle_{n:05d}.py", [idle_call(have, n)])
            have = n
            job.refresh_dags(utcnow(), force=True)
            if active_dags(factory) != n:
                raise BenchError(f"expected {n} idle DAGs, found {active_dags(factory)}")
            label = f"W4-{n}"
            is_last = n == sizes.w4_dags[-1]
            with prof.record(label, os.getpid(), focus=("tick",)) if is_last else _nothing():
                times = [timed_tick(job) for _ in range(WARM_TICKS + sizes.w4_ticks)]
            measured = times[WARM_TICKS:]
            figures[f"loop_ms_{n}_dags"] = median(measured)
            figures[f"loop_p95_ms_{n}_dags"] = percentile(measured, 95)
    first, last = sizes.w4_dags[0], sizes.w4_dags[-1]
    figures["ratio_largest_to_smallest"] = (
        figures[f"loop_ms_{last}_dags"] / figures[f"loop_ms_{first}_dags"]
    )
    return {
        "title": f"scheduler loop (tick) with {', '.join(map(str, sizes.w4_dags))} idle DAGs",
        "figures": figures,
    }


@contextmanager
def _nothing() -> Iterator[None]:
    yield


_clock_offset = [0.0]


def timed_tick(job: SchedulerJob) -> float:
    """One tick in which every periodic step is due (a full pass, due-run and queued-run
    checks, the folder refresh, the sweeps): the clock jumps 2 s per tick."""
    _clock_offset[0] += 2.0
    now = utcnow() + dt.timedelta(seconds=_clock_offset[0])
    t0 = time.perf_counter()
    job.tick(now)
    return (time.perf_counter() - t0) * 1000.0


TIMED_STEPS = ("start_or_create", "examine_runs", "queue", "queue_and_publish")
"""Steps of a scheduling pass timed separately, whichever of them the job has."""


def _one_pass(job: SchedulerJob, run_pk: int) -> dict[str, float]:
    """One `scheduling_pass` after a wake-up for the run, its steps timed separately
    by wrapping them on the instance."""
    spent: dict[str, float] = {}
    wrapped = [name for name in TIMED_STEPS if hasattr(job, name)]
    for name in wrapped:
        setattr(job, name, _timed(getattr(job, name), name, spent))
    wake(job.waker, run_pk)
    now = utcnow()
    result = TickResult()
    try:
        t0 = time.perf_counter()
        job.scheduling_pass(now, result)
        total = time.perf_counter() - t0
    finally:
        for name in wrapped:
            delattr(job, name)
    return {
        "seconds": total,
        "examine_seconds": spent.get("examine_runs", math.nan),
        "queue_seconds": spent.get("queue", spent.get("queue_and_publish", math.nan)),
        "scheduled": float(result.tis_scheduled),
        "queued": float(result.tis_queued),
    }


def _timed(fn: Callable[..., Any], name: str, spent: dict[str, float]) -> Callable[..., Any]:
    def timed(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[name] = spent.get(name, 0.0) + time.perf_counter() - t0

    return timed


def w5_scheduling_pass(
    db: BenchDb, workdir: Path, namespace: str, sizes: Sizes, prof: Profiler
) -> Result:
    """Passes over one run of a `w5_tasks`-task fan-out: its start, the fan-out, steady state.

    The figure is the fan-out pass (the root has succeeded: every middle task is decided
    `scheduled` and as many as the pool allows are queued), the heaviest of the three.
    """
    folder = workdir / "w5_dags"
    write_dag_file(folder / "bench_big.py", [fanout_call(DAG_W5, sizes.w5_tasks - 2)])
    sent: list[RunMessage] = []
    with scheduler_job(db, folder, namespace, sent) as (job, factory):
        t0 = time.perf_counter()
        job.refresh_dags(utcnow(), force=True)
        parse_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        with transaction(factory) as session:
            dag = session.get(Dag, DAG_W5)
            if dag is None:
                raise BenchError(f"{DAG_W5} was not parsed")
            now = utcnow()
            run = create_dagrun(session, dag, run_type=RunType.MANUAL, logical_date=now, now=now)
            run_pk = run.id
        create_s = time.perf_counter() - t0
        first = _one_pass(job, run_pk)
        if len(sent) != 1:
            raise BenchError(f"expected the root alone to be queued, got {len(sent)} messages")
        _succeed(factory, sent[0])
        with prof.record("W5-pass", os.getpid(), focus=("scheduling_pass", "examine_runs")):
            fan_out = _one_pass(job, run_pk)
        steady = _one_pass(job, run_pk)
    figures = {
        "pass_seconds": fan_out["seconds"],
        "pass_examine_seconds": fan_out["examine_seconds"],
        "pass_queue_seconds": fan_out["queue_seconds"],
        "pass_scheduled": fan_out["scheduled"],
        "pass_queued": fan_out["queued"],
        "first_pass_seconds": first["seconds"],
        "steady_pass_seconds": steady["seconds"],
        "create_run_seconds": create_s,
        "parse_seconds": parse_s,
        "tasks": float(sizes.w5_tasks),
    }
    return {"title": f"one scheduling pass over a {sizes.w5_tasks}-task run", "figures": figures}


def _succeed(factory: sessionmaker[Session], msg: RunMessage, result: str | None = None) -> None:
    """Write what a worker would: queued → running → success for this attempt (with
    `result`, the JSON of its return value, as the worker stores it)."""
    with transaction(factory) as session:
        for old, new in ((TI.QUEUED, TI.RUNNING), (TI.RUNNING, TI.SUCCESS)):
            values = {"result": result} if new is TI.SUCCESS and result is not None else None
            if not move_ti(
                session,
                msg.ti_id,
                new,
                expect=[old],
                now=utcnow(),
                attempt_id=msg.attempt_id,
                values=values,
            ):
                raise BenchError(f"could not move the root TI {old} → {new}")


def w11_expansion(
    db: BenchDb, workdir: Path, namespace: str, sizes: Sizes, prof: Profiler
) -> Result:
    """`w11_expansions` times, each on a fresh run of items() >> noop.expand(x=items())
    whose `items` succeeded with `w11_expand_items` items (started and queued by the
    job's own pass, its success written as a worker writes it): one transaction as a
    scheduling pass makes it — the run claimed (locked) as the pass claims it,
    `update_state`, the commit — which expands `noop` to one TI per item, all scheduled.
    The median; each run is then cancelled, so the next pass has only its own."""
    folder = workdir / "w11_dags"
    items = sizes.w11_expand_items
    write_dag_file(folder / "bench_mapped.py", [mapped_call(DAG_W11_EXPAND, items)])
    result = json.dumps(list(range(items)), separators=(",", ":"))  # as `check_result`
    sent: list[RunMessage] = []
    every: list[dict[str, float]] = []
    with scheduler_job(db, folder, namespace, sent) as (job, factory):
        job.refresh_dags(utcnow(), force=True)
        for i in range(sizes.w11_expansions):
            run_pk = _mapped_run_ready(job, factory, sent, result)
            last = i == sizes.w11_expansions - 1
            record = prof.record("W11-expansion", os.getpid(), focus=("update_state",))
            with record if last else _nothing():
                every.append(_timed_expansion(job, factory, run_pk, items))
            with transaction(factory) as session:
                cancel_runs(session, [run_pk], utcnow())
    seconds = [e["expansion_seconds"] for e in every]
    figures = {
        "expansion_seconds": median(seconds),
        "expansion_seconds_min": min(seconds),
        "expansion_seconds_max": max(seconds),
        "expansion_update_state_seconds": median([e["update_state_seconds"] for e in every]),
        "expansion_commit_seconds": median([e["commit_seconds"] for e in every]),
        "expansion_items": float(items),
        "expansions": float(len(every)),
    }
    return {
        "title": f"expansion of {items} items in one update_state transaction, in-process",
        "figures": figures,
        "runs": runs_of(every, "expansion_seconds"),
    }


def _mapped_run_ready(
    job: SchedulerJob, factory: sessionmaker[Session], sent: list[RunMessage], result: str
) -> int:
    """A new run, started by the job's pass (which queues `items`), `items` succeeded
    with `result`: the next decision of the run expands the mapped task."""
    with transaction(factory) as session:
        dag = session.get(Dag, DAG_W11_EXPAND)
        if dag is None:
            raise BenchError(f"{DAG_W11_EXPAND} was not parsed")
        now = utcnow()
        run = create_dagrun(session, dag, run_type=RunType.MANUAL, logical_date=now, now=now)
        run_pk = run.id
    sent.clear()
    wake(job.waker)  # as a trigger does: no run named
    job.scheduling_pass(utcnow(), TickResult())
    if len(sent) != 1 or sent[0].task_id == MAPPED_TASK:
        raise BenchError(f"expected `items` alone to be queued, got {len(sent)} messages")
    _succeed(factory, sent[0], result)
    return run_pk


def _timed_expansion(
    job: SchedulerJob, factory: sessionmaker[Session], run_pk: int, items: int
) -> dict[str, float]:
    """One transaction: the run claimed as a pass claims it, `update_state`, the commit."""
    now = utcnow()
    t0 = time.perf_counter()
    with transaction(factory) as session:
        runs = claim_runs_to_examine(session, job.runs_i_drive(), 1, {run_pk})
        if len(runs) != 1:
            raise BenchError(f"could not claim run {run_pk}")
        run = runs[0]
        max_age = job.settings.dag_refresh_interval  # as the pass reads it
        dag = job.dag_cache.get_many(session, [run.dag_id], max_age=max_age)[run.dag_id]
        t1 = time.perf_counter()
        decision = update_state(session, run, dag, now, max_map_length=job.settings.max_map_length)
        t2 = time.perf_counter()
    total = time.perf_counter() - t0
    with factory() as session:
        indexes = session.scalar(
            select(func.count()).where(
                TaskInstance.dag_run_id == run_pk,
                TaskInstance.task_id == MAPPED_TASK,
                TaskInstance.map_index >= 0,
                TaskInstance.state == TI.SCHEDULED,
            )
        )
    if indexes != items or len(decision.scheduled) != items:
        raise BenchError(
            f"expected {items} scheduled indexes, found {indexes} ({len(decision.scheduled)} "
            "scheduled by update_state)"
        )
    return {
        "expansion_seconds": total,
        "update_state_seconds": t2 - t1,
        "commit_seconds": total - (t2 - t0),
    }
