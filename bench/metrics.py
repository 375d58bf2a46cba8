"""Figures from the database's own timestamps: throughput, chain hops, percentiles."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from sluice.scheduler.core.models import DagRun, TaskInstance


@dataclass(frozen=True)
class TiTimes:
    """The timestamps of one TaskInstance."""

    run_pk: int
    task_id: str
    state: str
    scheduled_at: dt.datetime | None
    queued_at: dt.datetime | None
    start: dt.datetime | None
    end: dt.datetime | None


@dataclass(frozen=True)
class RunTimes:
    run_pk: int
    state: str
    queued_at: dt.datetime | None
    start: dt.datetime | None
    end: dt.datetime | None


def read_tis(factory: sessionmaker[Session], run_pks: Sequence[int]) -> list[TiTimes]:
    with factory() as session:
        rows = session.execute(
            select(
                TaskInstance.dag_run_id,
                TaskInstance.task_id,
                TaskInstance.state,
                TaskInstance.scheduled_at,
                TaskInstance.queued_at,
                TaskInstance.start_date,
                TaskInstance.end_date,
            ).where(TaskInstance.dag_run_id.in_(list(run_pks)))
        ).all()
    return [TiTimes(r[0], r[1], str(r[2]), r[3], r[4], r[5], r[6]) for r in rows]


def read_runs(factory: sessionmaker[Session], run_pks: Sequence[int]) -> list[RunTimes]:
    with factory() as session:
        rows = session.execute(
            select(
                DagRun.id, DagRun.state, DagRun.queued_at, DagRun.start_date, DagRun.end_date
            ).where(DagRun.id.in_(list(run_pks)))
        ).all()
    return [RunTimes(r[0], str(r[1]), r[2], r[3], r[4]) for r in rows]


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0–100) with linear interpolation (numpy's default)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def median(values: Sequence[float]) -> float:
    return percentile(values, 50)


def span_seconds(tis: Iterable[TiTimes]) -> float:
    """Seconds from the first task start to the last task end."""
    items = list(tis)
    starts = [t.start for t in items if t.start is not None]
    ends = [t.end for t in items if t.end is not None]
    if not starts or not ends:
        return math.nan
    return (max(ends) - min(starts)).total_seconds()


def throughput(tis: Sequence[TiTimes]) -> dict[str, float]:
    """tasks/s = finished tasks / (last end − first start), and where the time went.

    `task_ms_mean`: start → end of one TI (claim stamped … result stamped, on the worker);
    `slots_busy_mean`: Σ(end − start) / span, the worker processes busy on average;
    `queued_to_start_ms_median`: queued_at → start (publish, broker, worker pick-up, claim).
    """
    done = [t for t in tis if t.end is not None and t.start is not None]
    seconds = span_seconds(done)
    rate = len(done) / seconds if seconds and seconds > 0 else math.nan
    busy = [_ms(t.end - t.start) for t in done if t.end is not None and t.start is not None]
    waits = [_ms(t.start - t.queued_at) for t in done if t.start and t.queued_at]
    return {
        "tasks": float(len(done)),
        "seconds": seconds,
        "tasks_per_s": rate,
        "task_ms_mean": sum(busy) / len(busy) if busy else math.nan,
        "slots_busy_mean": sum(busy) / 1000.0 / seconds if seconds and seconds > 0 else math.nan,
        "queued_to_start_ms_median": median(waits),
    }


def chain_hops(tis: Sequence[TiTimes]) -> dict[str, list[float]]:
    """Per-hop latencies (ms) of chains, task i against task i−1 in task-id order, per run.

    `hop`: start(i) − end(i−1). Its two parts: `to_scheduled`: scheduled_at(i) − end(i−1)
    (wake-up and the scheduler's decision), `scheduled_to_start`: start(i) − scheduled_at(i)
    (queueing, publish, broker and the worker's claim).
    """
    by_run: dict[int, list[TiTimes]] = {}
    for ti in tis:
        by_run.setdefault(ti.run_pk, []).append(ti)
    out: dict[str, list[float]] = {"hop": [], "to_scheduled": [], "scheduled_to_start": []}
    for items in by_run.values():
        items.sort(key=lambda t: t.task_id)
        for prev, cur in zip(items, items[1:], strict=False):
            if prev.end is None or cur.start is None:
                continue
            out["hop"].append(_ms(cur.start - prev.end))
            if cur.scheduled_at is not None:
                out["to_scheduled"].append(_ms(cur.scheduled_at - prev.end))
                out["scheduled_to_start"].append(_ms(cur.start - cur.scheduled_at))
    return out


def _ms(delta: dt.timedelta) -> float:
    return delta.total_seconds() * 1000.0


def summary_ms(values: Sequence[float]) -> dict[str, float]:
    return {
        "median_ms": median(values),
        "p95_ms": percentile(values, 95),
        "min_ms": min(values) if values else math.nan,
        "max_ms": max(values) if values else math.nan,
        "n": float(len(values)),
    }


def run_seconds(runs: Sequence[RunTimes]) -> float:
    """Seconds from the first run's start to the last run's end."""
    starts = [r.start for r in runs if r.start is not None]
    ends = [r.end for r in runs if r.end is not None]
    if not starts or not ends:
        return math.nan
    return (max(ends) - min(starts)).total_seconds()


def median_run(runs: Sequence[dict[str, float]], key: str) -> dict[str, float]:
    """The figures of the run whose `key` is the median (the lower middle of an even
    count); every run's `key` goes beside them, as `runs_of(runs, key)`."""
    ordered = sorted(runs, key=lambda figures: figures[key])
    return dict(ordered[(len(ordered) - 1) // 2])


def runs_of(runs: Sequence[dict[str, float]], key: str) -> dict[str, list[float]]:
    """`{key: [each run's key]}`, for a workload entry's `runs`."""
    return {key: [figures[key] for figures in runs]}
