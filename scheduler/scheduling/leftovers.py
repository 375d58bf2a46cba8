"""What a process that held its broker in memory left when it died, taken up at once.

`sluice standalone` keeps its broker (kombu's `memory://`) and its worker threads in its
own process. When it stops before a run's end (Ctrl-C, a kill, a crash), every message
it had published and no worker had claimed died with it, and so did the tries its
worker threads were running. The next standalone starts with an empty broker: nothing
can be in flight, so it need not wait `SLUICE_QUEUED_TIMEOUT` nor
`SLUICE_HEARTBEAT_TIMEOUT` to know it.

Invariants:
- A queued try is published again with its own `attempt_id`: if its old message ever
  arrived too (another process on the same database still had it), the worker's
  claim keeps it to one execution.
- A job's process counts as gone only on this host (its `hostname`), by its pid
  (`alive`); the tries failed are the ones that process ran itself (same host and pid),
  as the heartbeat sweep would fail them, one try spent. A process that is still there
  (another standalone on the same database) keeps its job and its tries.
- Nothing is sent here: the caller commits, then publishes the messages.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy import ColumnElement, update
from sqlalchemy.orm import Session

from sluice.scheduler.core.messages import RunMessage
from sluice.scheduler.core.models import Job, TaskInstance
from sluice.scheduler.core.queries.jobs import lock_running_jobs_on, release_jobs
from sluice.scheduler.core.queries.tis import lock_expired_queued, lock_running_in
from sluice.scheduler.core.states import TI
from sluice.scheduler.decide.queueing import fail_running_tries, message_for

log = logging.getLogger(__name__)

BATCH = 512


@dataclass
class Leftovers:
    """What `take_up` found: the jobs whose process is gone, the tries those processes
    were running (failed), and the queued tries to publish again."""

    gone_jobs: list[int] = field(default_factory=list)
    runs_released: int = 0
    tries_failed: int = 0
    messages: list[RunMessage] = field(default_factory=list)


def take_up(
    session: Session,
    *,
    now: dt.datetime,
    hostname: str,
    alive: Callable[[Job], bool],
    runs: ColumnElement[bool],
    own_job_id: int | None,
) -> Leftovers:
    """In the caller's transaction: release the jobs of gone processes on `hostname`
    (not `own_job_id`), fail the tries those processes ran, and make the messages of
    every queued try of the runs matching `runs` (sent after the commit)."""
    found = Leftovers()
    gone = [
        job
        for job in lock_running_jobs_on(session, hostname)
        if job.id != own_job_id and not alive(job)
    ]
    if gone:
        found.gone_jobs = [job.id for job in gone]
        found.runs_released = sum(release_jobs(session, gone, now).values())
        for pid in sorted({job.pid for job in gone}):
            error = f"its worker (process {pid} on {hostname}) stopped"
            while True:
                tis = lock_running_in(session, hostname, [pid], runs, BATCH)
                found.tries_failed += fail_running_tries(session, tis, now, error)
                if len(tis) < BATCH:
                    break
    found.messages = republish_queued(session, now=now, runs=runs)
    return found


def republish_queued(
    session: Session, *, now: dt.datetime, runs: ColumnElement[bool]
) -> list[RunMessage]:
    """The messages of every try of the runs matching `runs` that is queued and not
    published since `now`, each stamped `published_at = now` (so the queued sweep
    waits a whole timeout again); the caller sends them after its commit."""
    messages: list[RunMessage] = []
    while True:
        queued = lock_expired_queued(session, now, BATCH, runs)
        if not queued:
            return messages
        session.execute(
            update(TaskInstance)
            .where(TaskInstance.id.in_([ti.id for ti in queued]), TaskInstance.state == TI.QUEUED)
            .values(published_at=now)
            .execution_options(synchronize_session=False)
        )
        messages += [message_for(ti) for ti in queued if ti.attempt_id]
        if len(queued) < BATCH:
            return messages
