"""SchedulerJob: the scheduling loop. Run as many as you like.

`run()` is a short loop: stop flag, one `tick()`, wait for a wake-up or the
loop interval. `tick()` does, each step in its own short transaction:
heartbeat; refresh DAG files (when due); create due runs (DAG rows locked SKIP
LOCKED); start queued runs within max_active_runs (DAG rows locked SKIP
LOCKED); examine running runs (claimed SKIP LOCKED); queue scheduled TIs
(pool rows locked) and publish after commit; sweeps (when due).
"""

from __future__ import annotations

import datetime as dt
import logging
import time

from sqlalchemy import select
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from scheduler.dagbag import next_run_fields, sync_dag_folder
from scheduler.dagrun import RunExists, create_dagrun
from scheduler.db import transaction
from scheduler.jobs.base import DagRunJob, TickResult
from scheduler.models import DagRun
from scheduler.queries.runs import (
    count_running_runs,
    dags_with_queued_runs,
    lock_dags,
    lock_due_dags,
    queued_runs_of,
)
from scheduler.queueing import fail_dead_running, requeue_expired
from scheduler.states import DagRunState, JobState, RunType

log = logging.getLogger("sluice.scheduler")


class SchedulerJob(DagRunJob):
    job_type = "scheduler"

    _last_dag_sync: dt.datetime | None = None
    _last_sweep: dt.datetime | None = None

    def run(self, num_loops: int | None = None) -> None:
        """Loop until stopped (or `num_loops` iterations); survives database and broker outages."""
        self._with_retries(self.register)
        loops = 0
        backoff = 0.5
        try:
            while not self.stopping and (num_loops is None or loops < num_loops):
                loops += 1
                try:
                    result = self.tick(self.clock())
                    backoff = 0.5
                except DBAPIError as exc:
                    log.warning("database error, retrying in %.1fs: %s", backoff, exc)
                    time.sleep(backoff)
                    backoff = min(backoff * 2, 10.0)
                    continue
                if not result.busy and not self.stopping:
                    self.waker.wait(self.settings.loop_interval)
        finally:
            try:
                self.finish(JobState.SUCCESS)
            except DBAPIError as exc:
                log.warning("could not mark job %s finished: %s", self.job_id, exc)

    def _with_retries(self, step: object) -> None:
        backoff = 0.5
        while True:
            try:
                step()  # type: ignore[operator]
                return
            except DBAPIError as exc:
                if self.stopping:
                    raise
                log.warning("database unavailable, retrying in %.1fs: %s", backoff, exc)
                time.sleep(backoff)
                backoff = min(backoff * 2, 10.0)

    def tick(self, now: dt.datetime) -> TickResult:
        result = TickResult()
        self.heartbeat(now)
        self.refresh_dags(now)
        result.runs_created = self.create_due_runs(now)
        result.runs_started = self.start_queued_runs(now)
        self.examine_runs(now, result)
        self.queue_and_publish(now, result)
        self.sweep(now, result)
        return result

    def refresh_dags(self, now: dt.datetime, *, force: bool = False) -> None:
        last = self._last_dag_sync
        if not force and last is not None and (
            (now - last).total_seconds() < self.settings.dag_refresh_interval
        ):
            return
        self._last_dag_sync = now
        sync_dag_folder(
            self.factory,
            self.settings.dags_folder,
            parse_timeout=self.settings.parse_timeout,
            now=now,
        )

    def create_due_runs(self, now: dt.datetime) -> int:
        """Create the scheduled runs that are due; DAG rows locked SKIP LOCKED."""
        created = 0
        with transaction(self.factory) as session:
            for dag in lock_due_dags(session, now, limit=50):
                logical = dag.next_dagrun
                if logical is not None:
                    try:
                        with session.begin_nested():
                            create_dagrun(
                                session, dag, run_type=RunType.SCHEDULED,
                                logical_date=logical, now=now,
                            )
                        created += 1
                    except RunExists:
                        log.info("%s already has a run at %s", dag.dag_id, logical)
                fields = next_run_fields(dag.serialized, logical, now)
                for key, value in fields.items():
                    setattr(dag, key, value)
        return created

    def start_queued_runs(self, now: dt.datetime) -> int:
        """queued → running within each DAG's max_active_runs; DAG rows locked SKIP LOCKED."""
        started = 0
        with transaction(self.factory) as session:
            dag_ids = dags_with_queued_runs(session)
            if not dag_ids:
                return 0
            dags = lock_dags(session, dag_ids)
            running = count_running_runs(session, [d.dag_id for d in dags])
            live = self.live_jobs(session, now)
            for dag in dags:
                room = dag.max_active_runs - running.get(dag.dag_id, 0)
                if room <= 0:
                    continue
                runs = [
                    run
                    for run in queued_runs_of(session, dag.dag_id, room + 16)
                    if run.claimed_by_job_id in (None, self.job_id)
                    or run.claimed_by_job_id not in live
                ][:room]
                started += self.start_runs(session, runs, now)
        return started

    def sweep(self, now: dt.datetime, result: TickResult) -> None:
        """Re-publish TIs nobody claimed; retry or fail TIs whose worker died."""
        last = self._last_sweep
        interval = min(self.settings.queued_timeout, self.settings.heartbeat_timeout) / 2
        if last is not None and (now - last).total_seconds() < interval:
            return
        self._last_sweep = now
        with transaction(self.factory) as session:
            result.dead_tis = fail_dead_running(
                session, now=now, heartbeat_timeout=self.settings.heartbeat_timeout
            )
        with transaction(self.factory) as session:
            messages = requeue_expired(
                session, now=now, queued_timeout=self.settings.queued_timeout
            )
        result.tis_requeued = len(messages)
        self.send(messages)


def run_state(session: Session, dag_id: str, run_id: str) -> DagRunState | None:
    state = session.scalar(
        select(DagRun.state).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id)
    )
    return None if state is None else DagRunState(state)
