"""The scheduler jobs of `sluice standalone`, whose broker lives in its own memory.

`StandaloneJob` is a `SchedulerJob` that, once registered and before its first loop,
takes up what a standalone that died left (`scheduling.leftovers`): its broker is new,
so every queued try and every queued callback lost its message, and a try run by a
process that is gone stopped with it. `OneRunJob` drives one run and nothing else (`sluice
standalone --trigger`, as `airflow dags test`): it creates no scheduled run, starts
no other run, queues and publishes only that run's tries, and is done once the run has
ended and its callbacks ran.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
import time
from typing import Any

from sqlalchemy import ColumnElement, func, select
from sqlalchemy.orm import Session

from sluice.scheduler.core.callback_kinds import Status
from sluice.scheduler.core.db import transaction
from sluice.scheduler.core.messages import CallbackMessage
from sluice.scheduler.core.models import DagRun, DueCallback, Job
from sluice.scheduler.core.queries import callbacks as due
from sluice.scheduler.core.states import RUN_TERMINAL, DagRunState
from sluice.scheduler.decide import spans
from sluice.scheduler.jobs.scheduler_job import SchedulerJob
from sluice.scheduler.jobs.tick import TickResult
from sluice.scheduler.scheduling.leftovers import Leftovers, take_up

log = logging.getLogger(__name__)

CALLBACK_BATCH = 256
CALLBACK_GRACE_SECONDS = 10.0
"""How long a `OneRunJob` waits, once its run has ended, for the run's callbacks to run
(then they stay due for the next start)."""


PROCESS_STARTED = dt.datetime.now(dt.UTC)
"""When this process imported this module: a job row with its pid started before that
is from before a restart of the host."""


def pid_alive(pid: int) -> bool:
    """Whether process `pid` exists on this host (this process's own pid counts as gone:
    a job row with it is from before a restart of the host, not this process's)."""
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


class StandaloneJob(SchedulerJob):
    """A scheduler that takes up, at start, what a standalone that died left."""

    def run(self, num_loops: int | None = None) -> None:
        if self.job_id is None:
            self.retrying(self.register)
        try:
            self.retrying(self.take_up_leftovers)
        except BaseException as exc:
            self.on_exit(exc if isinstance(exc, Exception) else None)  # as after the loop
            raise
        super().run(num_loops)

    def take_up_leftovers(self) -> Leftovers:
        """One transaction: release the jobs whose process is gone from this host, fail
        the tries they ran, re-publish every queued try of the runs this job drives and
        every queued callback (after the commit)."""
        now = self.clock()
        with transaction(self.factory) as session:
            found = take_up(
                session,
                now=now,
                hostname=socket.gethostname(),
                alive=_job_alive,
                runs=self.runs_i_drive(),
                own_job_id=self.job_id,
            )
            spans.adopt_spans_of_dead(session, found.gone_jobs, self.job_id)
            callbacks = self._lost_callbacks(session, now)
        if found.gone_jobs:
            log.warning(
                "job(s) %s stopped without ending (their process is gone): %d run(s) "
                "released, %d running tries failed",
                ", ".join(map(str, found.gone_jobs)),
                found.runs_released,
                found.tries_failed,
            )
        if found.messages or callbacks:
            log.warning(
                "publishing again %d queued tries and %d queued callbacks a stopped "
                "standalone left (their messages died with its broker)",
                len(found.messages),
                len(callbacks),
            )
        self.send(found.messages)
        if callbacks and self.callbacks is not None:
            try:
                self.callbacks.publish(callbacks)
            except Exception as exc:  # published again after the queued timeout
                log.warning("publishing %d callbacks failed: %s", len(callbacks), exc)
        return found

    def _lost_callbacks(self, session: Session, now: dt.datetime) -> list[CallbackMessage]:
        """The due callbacks, the queued ones included at once (their messages are lost);
        a running one waits for its heartbeat to be gone (its worker may be elsewhere)."""
        if self.callbacks is None:
            return []
        messages: list[CallbackMessage] = []
        while True:
            batch = due.publish_due(
                session,
                now,
                republish_after=0.0,
                heartbeat_timeout=self.settings.heartbeat_timeout,
                max_attempts=self.settings.callback_max_attempts,
                limit=CALLBACK_BATCH,
            )
            messages += batch
            if len(batch) < CALLBACK_BATCH:
                return messages


class OneRunJob(StandaloneJob):
    """Drives the run `run_pk` alone, to its end, whatever its DAG's schedule, pause or
    `max_active_runs` (the user asked for this run, now)."""

    def __init__(self, *args: Any, run_pk: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.run_pk = run_pk
        self._ended_at: float | None = None

    def drivable(self) -> ColumnElement[bool]:
        return DagRun.id == self.run_pk

    def start_or_create(self, session: Session, now: dt.datetime, result: TickResult) -> None:
        """No scheduled run is created; the one run is started (queued → running) by
        the first pass that commits."""
        run = session.get(DagRun, self.run_pk)
        if run is not None and run.state == DagRunState.QUEUED:
            result.runs_started = self.start_runs(session, [run], now)

    def done(self) -> bool:
        """The run has ended and its callbacks ran, or `CALLBACK_GRACE_SECONDS` passed
        since its end."""
        with self.factory() as session:
            state = session.scalar(select(DagRun.state).where(DagRun.id == self.run_pk))
            if state not in RUN_TERMINAL:
                return False
            waiting = session.scalar(
                select(func.count())
                .select_from(DueCallback)
                .where(
                    DueCallback.dag_run_id == self.run_pk,
                    DueCallback.status.in_(Status.UNFINISHED),
                )
            )
        self._ended_at = self._ended_at or time.monotonic()
        return not waiting or time.monotonic() - self._ended_at > CALLBACK_GRACE_SECONDS


def _job_alive(job: Job) -> bool:
    """Whether `job`'s process is alive: another live process, or this one when the job
    started after it did (the standalone's triggerer, registered by its thread before
    the leftovers are taken up)."""
    if job.pid == os.getpid():
        return job.start_date >= PROCESS_STARTED
    return pid_alive(job.pid)
