"""Explain reasons about what holds a TI from outside its run's dependencies.

The run not running (paused DAG, max_active_runs, a job that claimed it), the pool
and max_active_tasks (what occupies them), the Celery queue and its workers, and
whether any scheduler is alive to act. Counting follows the scheduler exactly:
`queue_scheduled` (pool slots and per-DAG tasks of queued + running TIs) and
`start_queued_runs` (running runs other than backfill ones, per DAG).

Invariant: plain SELECTs in the caller's session; no lock, no write.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import func, select

from sluice.broker.queues import celery_queue
from sluice.scheduler.control.explain_model import Reason, Subject, duration, iso
from sluice.scheduler.control.explain_model import ReasonKind as K
from sluice.scheduler.control.explain_slots import slot_reasons
from sluice.scheduler.core.models import DagRun, Job, Pool, TaskInstance
from sluice.scheduler.core.queries.tis import used_slots_by_pool
from sluice.scheduler.core.states import TI_ACTIVE, DagRunState, JobState, RunType

MAX_LISTED = 10
"""At most this many occupants are listed (with the total count)."""


def _occupants(subject: Subject, *conditions: Any) -> tuple[list[dict[str, Any]], int]:
    """Active (queued/running) TIs matching `conditions`, oldest first, and how many."""
    where = [TaskInstance.state.in_(list(TI_ACTIVE)), *conditions]
    total = subject.session.scalar(select(func.count()).select_from(TaskInstance).where(*where))
    rows = subject.session.execute(
        select(
            TaskInstance.dag_id,
            TaskInstance.run_id,
            TaskInstance.task_id,
            TaskInstance.state,
            TaskInstance.pool_slots,
        )
        .where(*where)
        .order_by(TaskInstance.queued_at, TaskInstance.id)
        .limit(MAX_LISTED)
    ).all()
    listed = [
        {"dag_id": d, "run_id": r, "task_id": t, "state": str(s), "pool_slots": n}
        for d, r, t, s, n in rows
    ]
    return listed, int(total or 0)


def _names(occupants: list[dict[str, Any]], total: int) -> str:
    shown = ", ".join(f"{o['dag_id']}/{o['run_id']}/{o['task_id']}" for o in occupants[:3])
    more = total - min(len(occupants), 3)
    return shown + (f" and {more} more" if more > 0 else "")


def live_jobs(subject: Subject) -> list[Job]:
    cutoff = subject.now - dt.timedelta(seconds=subject.settings.heartbeat_timeout)
    return list(
        subject.session.scalars(
            select(Job)
            .where(Job.state == JobState.RUNNING, Job.latest_heartbeat >= cutoff)
            .order_by(Job.id)
        )
    )


def driver_reasons(subject: Subject) -> list[Reason]:
    """Who will act on this run: a live job that claimed it, or any live scheduler."""
    jobs = live_jobs(subject)
    claimed = subject.run.claimed_by_job_id
    owner = next((j for j in jobs if j.id == claimed), None)
    if owner is not None:
        return [
            Reason(
                K.RUN_CLAIMED,
                f"the run is driven by {owner.job_type} job {owner.id} "
                f"({owner.hostname}, pid {owner.pid})",
                blocking=False,
                data={"job_id": owner.id, "job_type": owner.job_type, "hostname": owner.hostname},
            )
        ]
    if any(j.job_type == "scheduler" for j in jobs):
        return []
    timeout = subject.settings.heartbeat_timeout
    return [
        Reason(
            K.NO_SCHEDULER,
            f"no scheduler is running (none heartbeated in the last {timeout:g}s): "
            "start one with `sluice scheduler`",
            data={"heartbeat_timeout": timeout},
        )
    ]


def run_reasons(subject: Subject) -> list[Reason]:
    """Why the run is not running (only asked when it is not)."""
    run, dag = subject.run, subject.dag
    reasons = [
        Reason(
            K.RUN_NOT_RUNNING,
            f"its run {run.run_id!r} is {run.state}, not running",
            data={"run_state": str(run.state)},
        )
    ]
    if run.state != DagRunState.QUEUED:
        reasons[0].detail += ", so nothing more of it is scheduled"
        return reasons
    owner = driver_reasons(subject)
    if owner and owner[0].kind is K.RUN_CLAIMED:
        owner[0].blocking = True
        owner[0].detail += ", which starts it within its own max_active_runs"
        return reasons + owner
    if dag.is_paused and run.run_type != RunType.BACKFILL:
        reasons.append(
            Reason(
                K.DAG_PAUSED,
                f"DAG {dag.dag_id!r} is paused, so no new run of it starts "
                f"(`sluice dags unpause {dag.dag_id}`)",
                data={"is_paused": True},
            )
        )
    running = subject.session.scalars(
        select(DagRun.run_id)
        .where(
            DagRun.dag_id == dag.dag_id,
            DagRun.state == DagRunState.RUNNING,
            DagRun.run_type != RunType.BACKFILL,
        )
        .order_by(DagRun.logical_date)
    ).all()
    if len(running) >= dag.max_active_runs:
        shown = ", ".join(repr(r) for r in running[:3])
        reasons.append(
            Reason(
                K.MAX_ACTIVE_RUNS,
                f"DAG {dag.dag_id!r} already has {len(running)} of max_active_runs="
                f"{dag.max_active_runs} runs running ({shown})",
                data={
                    "max_active_runs": dag.max_active_runs,
                    "running": len(running),
                    "running_runs": list(running[:MAX_LISTED]),
                },
            )
        )
    return reasons + owner


def limit_reasons(subject: Subject) -> list[Reason]:
    """For a scheduled TI: the pool and max_active_tasks, as `queue_scheduled` counts them,
    and its concurrency key and rate limit (`explain_slots`)."""
    ti, dag = subject.ti, subject.dag
    assert ti is not None
    reasons: list[Reason] = []
    slots = subject.session.scalar(select(Pool.slots).where(Pool.name == ti.pool))
    if slots is None:
        reasons.append(
            Reason(
                K.POOL_MISSING,
                f"pool {ti.pool!r} does not exist (create it: `sluice pools set {ti.pool} N`)",
                data={"pool": ti.pool},
            )
        )
    elif ti.pool_slots > slots:
        reasons.append(
            Reason(
                K.POOL_TOO_SMALL,
                f"it needs {ti.pool_slots} slots of pool {ti.pool!r}, which has only {slots}",
                data={"pool": ti.pool, "slots": slots, "pool_slots": ti.pool_slots},
            )
        )
    else:
        used = used_slots_by_pool(subject.session).get(ti.pool, 0)
        if ti.pool_slots > slots - used:
            occupants, total = _occupants(subject, TaskInstance.pool == ti.pool)
            reasons.append(
                Reason(
                    K.POOL_FULL,
                    f"pool {ti.pool!r} is full: {used} of {slots} slots used by "
                    f"{_names(occupants, total)}",
                    data={
                        "pool": ti.pool,
                        "slots": slots,
                        "used": used,
                        "free": max(slots - used, 0),
                        "needed": ti.pool_slots,
                        "occupied_by": occupants,
                        "occupied_by_total": total,
                    },
                )
            )
    occupants, active = _occupants(subject, TaskInstance.dag_id == dag.dag_id)
    if active >= dag.max_active_tasks:
        reasons.append(
            Reason(
                K.MAX_ACTIVE_TASKS,
                f"DAG {dag.dag_id!r} already has {active} of max_active_tasks="
                f"{dag.max_active_tasks} tasks queued or running: {_names(occupants, active)}",
                data={
                    "max_active_tasks": dag.max_active_tasks,
                    "active": active,
                    "occupied_by": occupants,
                },
            )
        )
    return reasons + slot_reasons(subject)


def queue_reasons(subject: Subject) -> list[Reason]:
    """For a queued TI: its Celery queue, for how long, and who serves it."""
    ti, now, settings = subject.ti, subject.now, subject.settings
    assert ti is not None
    name = celery_queue(settings.namespace, ti.queue)
    waited = (now - ti.queued_at).total_seconds() if ti.queued_at else 0.0
    published = max(ti.queued_at, ti.published_at) if ti.queued_at and ti.published_at else None
    published = published or ti.queued_at
    republish_at = published + dt.timedelta(seconds=settings.queued_timeout) if published else None
    workers = None if subject.workers is None else subject.workers.get(ti.queue, [])
    detail = f"it waits in Celery queue {name!r} since {duration(waited)} ago for a worker"
    if workers:
        detail += f"; {len(workers)} worker(s) serve that queue ({', '.join(workers[:3])})"
    queued = Reason(
        K.QUEUED,
        detail,
        data={
            "queue": ti.queue,
            "celery_queue": name,
            "queued_at": iso(ti.queued_at),
            "waiting_seconds": round(waited, 3),
            "attempt_id": ti.attempt_id,
            "republish_at": iso(republish_at),
            "served": None if workers is None else bool(workers),
            "workers": workers,
        },
    )
    reasons = [queued, *no_worker_reasons(subject)]
    if republish_at is not None and republish_at <= now:
        queued.detail += "; unclaimed past the queued timeout, a scheduler publishes it again"
    return reasons


def no_worker_reasons(subject: Subject) -> list[Reason]:
    """A warning when the workers were asked and none serves the TI's queue."""
    queue = subject.ti.queue if subject.ti is not None else (subject.task or {}).get("queue")
    queue = queue or "default"
    if subject.workers is None or subject.workers.get(queue):
        return []
    name = celery_queue(subject.settings.namespace, queue)
    serving = sorted(subject.workers)
    return [
        Reason(
            K.NO_WORKER,
            f"no worker serves queue {queue!r} (Celery queue {name!r}): "
            f"start one with `sluice worker -Q {queue}`",
            data={"queue": queue, "celery_queue": name, "queues_served": serving},
        )
    ]
