"""Who else has a live heartbeat in the database: jobs (schedulers, backfills, standalones)
and workers (their running tries).

No lock is taken: plain reads in the caller's session, which never commit. Whether a
process on this host is still there is the caller's to find out (by its pid).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from sluice.scheduler.core.models import Job, TaskInstance
from sluice.scheduler.core.states import TI, JobState


def jobs_beating_since(session: Session, cutoff: dt.datetime) -> Sequence[Any]:
    """(job_type, hostname, pid, heartbeat) of the running jobs whose heartbeat is
    `cutoff` or later, the freshest first. Read through the index on (state,
    latest_heartbeat)."""
    return session.execute(
        select(Job.job_type, Job.hostname, Job.pid, Job.latest_heartbeat.label("heartbeat"))
        .where(Job.state == JobState.RUNNING, Job.latest_heartbeat >= cutoff)
        .order_by(Job.latest_heartbeat.desc(), Job.id)
    ).all()


def workers_beating_since(session: Session, cutoff: dt.datetime) -> Sequence[Any]:
    """(hostname, pid, heartbeat) of each process running tries whose heartbeat is
    `cutoff` or later (its freshest), the freshest first. Read through the index on
    (state, pool)."""
    heartbeat = func.max(TaskInstance.last_heartbeat_at).label("heartbeat")
    return session.execute(
        select(TaskInstance.hostname, TaskInstance.pid, heartbeat)
        .where(TaskInstance.state == TI.RUNNING, TaskInstance.last_heartbeat_at >= cutoff)
        .group_by(TaskInstance.hostname, TaskInstance.pid)
        .order_by(heartbeat.desc())
    ).all()
