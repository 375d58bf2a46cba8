"""Queries over job rows: finding dead jobs (silent, or gone from their host) and
releasing what they held.

Lock rule: a dead job's row is taken FOR UPDATE SKIP LOCKED and marked failed
in the same transaction that releases its runs, so exactly one scheduler acts
on each dead job.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
from collections.abc import Sequence

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from sluice.scheduler.core.models import DagRun, Job
from sluice.scheduler.core.states import RUN_UNFINISHED, JobState


def release_dead_jobs(session: Session, cutoff: dt.datetime, now: dt.datetime) -> dict[int, int]:
    """Mark jobs silent since `cutoff` failed and unclaim their unfinished runs.

    Returns {job id: runs released}.
    """
    dead = session.scalars(
        select(Job)
        .where(Job.state == JobState.RUNNING, Job.latest_heartbeat < cutoff)
        .order_by(Job.id)
        .with_for_update(skip_locked=True)
    ).all()
    return release_jobs(session, dead, now)


def lock_running_jobs_on(session: Session, hostname: str) -> Sequence[Job]:
    """The jobs marked running on `hostname`, locked SKIP LOCKED (whether each process
    is still there is the caller's to find out)."""
    return session.scalars(
        select(Job)
        .where(Job.state == JobState.RUNNING, Job.hostname == hostname)
        .order_by(Job.id)
        .with_for_update(skip_locked=True)
    ).all()


def release_jobs(session: Session, jobs: Sequence[Job], now: dt.datetime) -> dict[int, int]:
    """Mark `jobs` (locked by the caller) failed and unclaim their unfinished runs.

    Returns {job id: runs released}.
    """
    released: dict[int, int] = {}
    for job in jobs:
        job.state = JobState.FAILED
        job.end_date = now
        result = session.execute(
            update(DagRun)
            .where(DagRun.claimed_by_job_id == job.id, DagRun.state.in_(list(RUN_UNFINISHED)))
            .values(claimed_by_job_id=None)
            .execution_options(synchronize_session=False)
        )
        released[job.id] = int(getattr(result, "rowcount", 0) or 0)
    return released


def release_orphaned_runs(session: Session) -> int:
    """Unclaim the unfinished runs still claimed by a job that is not `running` (a
    backfill whose transaction committed runs after it was marked dead); their count."""
    result = session.execute(
        update(DagRun)
        .where(
            DagRun.claimed_by_job_id.in_(select(Job.id).where(Job.state != JobState.RUNNING)),
            DagRun.state.in_(list(RUN_UNFINISHED)),
        )
        .values(claimed_by_job_id=None)
        .execution_options(synchronize_session=False)
    )
    return int(getattr(result, "rowcount", 0) or 0)


def add_job(session: Session, job_type: str, now: dt.datetime, capacity: int | None = None) -> int:
    """A new `running` job row of this process (host and pid), heartbeating from `now`
    (a triggerer's with its `capacity`); its id (flushed in the caller's transaction)."""
    job = Job(
        capacity=capacity,
        job_type=job_type,
        hostname=socket.gethostname(),
        pid=os.getpid(),
        state=JobState.RUNNING,
        start_date=now,
        latest_heartbeat=now,
    )
    session.add(job)
    session.flush()
    return job.id
