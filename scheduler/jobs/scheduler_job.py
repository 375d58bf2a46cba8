"""SchedulerJob: the scheduling loop. Run as many as you like.

`run()` is a short loop: stop flag, one `tick()`, wait for a wake-up or the
loop interval. `tick()` does: heartbeat; refresh DAG files (when due); then ONE
scheduling transaction that creates due runs (DAG rows locked SKIP LOCKED), starts
queued runs within max_active_runs (DAG rows locked SKIP LOCKED), examines running
runs (claimed SKIP LOCKED) and queues scheduled TIs (pool rows locked), and publishes
after its commit; then the sweeps (when due), each in a short transaction of its own.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from pathlib import Path
from typing import Any

from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker

from sluice.broker.wakeup import Waker
from sluice.scheduler.core.bundles import bundles_of
from sluice.scheduler.core.db import transaction, utcnow
from sluice.scheduler.core.db_wait import database_place, database_reason
from sluice.scheduler.core.models import Dag
from sluice.scheduler.core.queries.jobs import release_dead_jobs, release_orphaned_runs
from sluice.scheduler.core.queries.runs import (
    count_active_runs,
    count_running_runs,
    dags_with_queued_runs,
    lock_dags,
    lock_due_dags,
    queued_runs_of,
)
from sluice.scheduler.core.settings import Settings
from sluice.scheduler.core.states import RunType
from sluice.scheduler.decide import spans
from sluice.scheduler.jobs.base import DagRunJob
from sluice.scheduler.jobs.callbacks import CallbackDelivery, PublishCallbacks
from sluice.scheduler.jobs.periodic import Every
from sluice.scheduler.jobs.tick import TickResult
from sluice.scheduler.scheduling.asset_runs import create_asset_runs
from sluice.scheduler.scheduling.bundle_sync import sync_bundles
from sluice.scheduler.scheduling.dagbag import next_run_fields
from sluice.scheduler.scheduling.dagrun import RunExists, create_dagrun

log = logging.getLogger(__name__)


class DagFolderParser:
    """Parses what changed in the DAG folder every `dag_refresh_interval`, in a daemon
    thread of the scheduler's process, and wakes the scheduler when something changed.

    Each file has its deadline (`parse_timeout`, in the parser subprocess); the loop and
    its heartbeats go on meanwhile. A database error is logged and tried again at the
    next interval."""

    def __init__(self, settings: Settings, factory: sessionmaker[Session], waker: Waker) -> None:
        self.settings = settings
        self.factory = factory
        self.waker = waker
        self.gits = bundles_of(settings)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="sluice-dag-parser", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.settings.parse_timeout + 5)

    def _loop(self) -> None:
        missing: list[str] = []
        failing: set[str] = set()
        while not self._stop.is_set():
            try:
                synced = sync_bundles(self.factory, self.settings, self.gits, now=utcnow())
                for folder in set(synced.folders_missing) - set(missing):
                    log.warning(
                        "the DAGs folder %s is gone: its DAGs keep their last definition",
                        Path(folder).resolve(),
                    )
                for folder in set(missing) - set(synced.folders_missing):
                    log.info("the DAGs folder %s is back", Path(folder).resolve())
                missing = synced.folders_missing
                for name in failing - set(synced.fetch_errors):
                    log.info("fetching DAG bundle %s works again", name)
                failing = set(synced.fetch_errors)
                if synced.changed:
                    self.waker.wake()
            except DBAPIError as exc:
                log.warning(
                    "recording the DAG folder's files failed (database at %s: %s), trying again",
                    database_place(self.settings.database_url),
                    database_reason(exc, self.settings.database_url),
                )
            self._stop.wait(self.settings.dag_refresh_interval)


class SchedulerJob(DagRunJob):
    job_type = "scheduler"

    def __init__(
        self, *args: Any, publish_callbacks: PublishCallbacks | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self._parser: DagFolderParser | None = None
        self.callbacks = (
            None
            if publish_callbacks is None
            else CallbackDelivery(self.settings, self.factory, publish_callbacks)
        )
        """Publishes due callbacks (None: this job leaves them to other schedulers)."""
        self._dag_syncs = Every(self.settings.dag_refresh_interval)
        self._gits = bundles_of(self.settings)
        self._start_checks = Every(1.0)
        self._create_checks = Every(1.0)
        self._releases = Every(self.settings.heartbeat_timeout / 4)

    def tick(self, now: dt.datetime) -> TickResult:
        result = TickResult()
        self.heartbeat(now)
        self.refresh_dags(now)
        self.scheduling_pass(now, result)
        self.poll_external_tasks(now)  # before the sweep: it refreshes their heartbeats
        self.sweep(now, result)
        self.release_dead_jobs(now, result)
        self.end_owned_spans(now)
        if self.callbacks is not None:
            self.callbacks.step(now)
        return result

    def hand_over(self, runs: set[int]) -> None:
        """Runs left by this pass's limit go to the shared news (after the commit, so
        whoever pops them sees them running): the next scheduler to take news, this one
        or another, examines them, so a burst of runs is split between schedulers."""
        self.waker.share(runs)

    def run(self, num_loops: int | None = None) -> None:
        """The loop of `DagRunJob.run`, with the DAG folder parsed beside it (a thread of
        its own: a slow file never stops scheduling nor heartbeats)."""
        self._parser = DagFolderParser(self.settings, self.factory, self.waker)
        self._parser.start()
        try:
            super().run(num_loops)
        finally:
            self._parser.stop()
            self._parser = None

    def refresh_dags(self, now: dt.datetime, *, force: bool = False) -> None:
        """Parse what changed in the DAG folder, here, unless `run` parses it beside the
        loop (a test or a bench calling `tick` directly gets it done inline)."""
        if self._parser is not None or not self._dag_syncs.take(now, force=force):
            return
        sync_bundles(self.factory, self.settings, self._gits, now=now)

    def lost_job_row(self) -> None:
        """A scheduler marked dead while alive (its heartbeat was late) registers again:
        its runs and spans were taken over; it goes on as a new job."""
        log.warning(
            "scheduler job %s was marked dead by another job (its heartbeat was late): "
            "going on as a new job",
            self.job_id,
        )
        self.register()

    def start_or_create(self, session: Session, now: dt.datetime, result: TickResult) -> None:
        result.runs_created = self.create_due_runs(session, now)
        # Queued runs appear when someone triggers or clears (a wake-up naming no run),
        # when this job creates runs, or when a finished run frees room: otherwise once a
        # second is enough, and the common pass (a task finished) skips the query.
        if self._start_checks.take(
            now,
            force=bool(
                result.runs_created or self._look_at_everything or self._runs_finished_last_pass
            ),
        ):
            result.runs_started = self.start_queued_runs(session, now)

    def create_due_runs(self, session: Session, now: dt.datetime) -> int:
        """Create the scheduled runs that are due, and the runs asset events make
        (`asset_runs`); DAG rows locked SKIP LOCKED.

        Looked for at most once a second (a run is created up to a second late).
        """
        if not self._create_checks.take(now):
            return 0
        created = 0
        for dag in lock_due_dags(session, now, limit=50):
            created += self._create_runs_of(session, dag, now)
        return created + create_asset_runs(session, now)

    def _create_runs_of(self, session: Session, dag: Dag, now: dt.datetime, most: int = 64) -> int:
        """Create the due runs of one locked DAG (catch-up included), at most `most`, and
        only while its queued and running runs are fewer than its max_active_runs (as
        Airflow does): a DAG catching up on years of one-second intervals creates its runs
        as they finish, not millions at once."""
        most = min(most, dag.max_active_runs - count_active_runs(session, dag.dag_id))
        created = 0
        while created < most and dag.next_dagrun_create_after is not None:
            if dag.next_dagrun_create_after > now:
                break
            logical = dag.next_dagrun
            if logical is None:
                break
            try:  # a clash writes nothing and leaves the transaction usable: no savepoint
                create_dagrun(
                    session, dag, run_type=RunType.SCHEDULED, logical_date=logical, now=now
                )
                created += 1
            except RunExists:
                log.info("%s already has a run at %s", dag.dag_id, logical)
            for key, value in next_run_fields(dag.serialized, logical, now).items():
                setattr(dag, key, value)
        # Written now: the session does not autoflush, and the pass's next lock of this DAG
        # row (`lock_dags`, a FOR UPDATE select) reloads it, which would drop the advance
        # and make the next look find the run just created.
        session.flush()
        return created

    def start_queued_runs(self, session: Session, now: dt.datetime) -> int:
        """queued → running within each DAG's max_active_runs; DAG rows locked SKIP LOCKED.

        A paused DAG starts no new run, except backfill runs, which a user asked for
        explicitly (and which a dead backfill left to the schedulers).
        """
        started = 0
        dag_ids = dags_with_queued_runs(session)
        if not dag_ids:
            return 0
        dags = lock_dags(session, dag_ids)
        running = count_running_runs(session, [d.dag_id for d in dags], RunType.BACKFILL)
        for dag in dags:
            room = dag.max_active_runs - running.get(dag.dag_id, 0)
            if room <= 0:
                continue
            runs = queued_runs_of(
                session,
                dag.dag_id,
                room,
                claimable_by=self.job_id,
                only_type=RunType.BACKFILL if dag.is_paused else None,
            )
            started += self.start_runs(session, runs, now)
        return started

    def release_dead_jobs(self, now: dt.datetime, result: TickResult) -> None:
        """Jobs whose heartbeat stopped are marked failed and their runs released (SKIP LOCKED)."""
        if not self._releases.take(now):
            return
        cutoff = now - dt.timedelta(seconds=self.settings.heartbeat_timeout)
        with transaction(self.factory) as session:
            released = release_dead_jobs(session, cutoff, now)
            result.dead_jobs = len(released)
            for job_id, runs in released.items():
                log.warning("job %s stopped heartbeating: released its %d run(s)", job_id, runs)
            if released:
                spans.adopt_spans_of_dead(session, list(released), self.job_id)
            orphans = release_orphaned_runs(session)
            if orphans:
                log.warning("released %d run(s) claimed by jobs that are not running", orphans)
