"""DagRunJob: what every job that drives DagRuns shares.

A job has a `job` row it heartbeats; each scheduling pass is one transaction that
claims running DagRuns (SKIP LOCKED), decides them with `dagrun.update_state` and
queues the scheduled TIs, and the pass publishes only after that commit
(`scheduling_pass`). The scheduler and the backfill differ only in which runs they
create and claim.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable, Sequence

from sqlalchemy import ColumnElement, or_, update
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker
from tenacity import Retrying, retry_if_exception

from sluice.broker.wakeup import Waker
from sluice.scheduler.core.dag_cache import SerializedDagCache
from sluice.scheduler.core.db import transaction, utcnow
from sluice.scheduler.core.db_wait import Backoff, database_place, database_reason
from sluice.scheduler.core.hot_sql import built
from sluice.scheduler.core.messages import RunMessage
from sluice.scheduler.core.models import Dag, DagRun, Job
from sluice.scheduler.core.queries.jobs import add_job
from sluice.scheduler.core.queries.runs import claim_runs_to_examine
from sluice.scheduler.core.retries import failure_of
from sluice.scheduler.core.settings import Settings
from sluice.scheduler.core.states import DagRunState, JobState, SpanStatus
from sluice.scheduler.core.tracing import Tracing
from sluice.scheduler.core.transitions import move_run, move_runs, short_error
from sluice.scheduler.decide import spans
from sluice.scheduler.decide.queueing import fail_dead_running, queue_scheduled, requeue_expired
from sluice.scheduler.jobs.celery_poller import poll_once
from sluice.scheduler.jobs.metrics import SchedulerMetrics
from sluice.scheduler.jobs.periodic import Every
from sluice.scheduler.jobs.stopping import stop_tries
from sluice.scheduler.jobs.tick import TickResult
from sluice.scheduler.scheduling.cancelling import cancel_runs
from sluice.scheduler.scheduling.dagrun import update_state
from sluice.scheduler.scheduling.fresh_runs import fresh_roots, schedule_fresh
from sluice.scheduler.scheduling.timeouts import run_timeout_error

log = logging.getLogger(__name__)

Publish = Callable[[Sequence[RunMessage]], None]


STOP_CHECK = 1.0
"""Seconds between two looks at `stopping` while a job waits for a wake-up."""


def job_error(exc: BaseException) -> str:
    """`Type: message` on one line, as stored in `job.error` (cut to ERROR_MAX_CHARS)."""
    text = " ".join(str(exc).split())
    return short_error(f"{type(exc).__name__}: {text}" if text else type(exc).__name__)


class JobLost(RuntimeError):
    """This job's row was marked dead by another job while it was still running."""


class DagRunJob:
    job_type = "dagrun"

    def __init__(
        self,
        settings: Settings,
        factory: sessionmaker[Session],
        publish: Publish,
        waker: Waker,
        clock: Callable[[], dt.datetime] = utcnow,
        tracing: Tracing | None = None,
        metrics: SchedulerMetrics | None = None,
    ) -> None:
        self.tracing = tracing or Tracing("sluice", env={})
        self.metrics = metrics or SchedulerMetrics.disabled()
        self.dag_cache = SerializedDagCache()
        self.settings = settings
        self.factory = factory
        self.publish = publish
        self.waker = waker
        self.clock = clock
        self.job_id: int | None = None
        self._heartbeats = Every(settings.heartbeat_interval)
        self._sweeps = Every(min(settings.queued_timeout, settings.heartbeat_timeout) / 4)
        self._queue_passes = Every(settings.loop_interval)
        self._full_passes = Every(settings.loop_interval)
        self._polls = Every(0.5)
        self._left_behind = False
        self._woken = False
        self._pending_news: set[int] = set()
        self._to_stop: list[str] = []
        self._to_revoke: list[str] = []
        self._started_now: set[int] = set()
        self._started_at: dt.datetime | None = None
        self._over_limit: set[int] = set()
        self._look_at_everything = True
        self._runs_finished_last_pass = False
        self._drivable: tuple[int | None, ColumnElement[bool]] | None = None
        self.stopping = False

    # -- the loop ----------------------------------------------------------------------------
    def tick(self, now: dt.datetime) -> TickResult:
        raise NotImplementedError

    def done(self) -> bool:
        """True when the job has nothing left to do (a scheduler never is)."""
        return False

    def run(self, num_loops: int | None = None) -> None:
        """Loop until stopped, done or `num_loops` iterations; survives database outages.

        An exception that ends the loop propagates, and the job row is recorded `failed`
        with it (`on_exit`): never `success`."""
        if self.job_id is None:
            self.retrying(self.register)
        self.waker.listen()  # before the first pass: a wake-up sent during it is heard
        loops = 0
        backoff = Backoff(self.settings)
        failure: Exception | None = None
        try:
            while not self.stopping and (num_loops is None or loops < num_loops):
                loops += 1
                try:
                    started = time.perf_counter()
                    result = self.tick(self.clock())
                    self.metrics.record_tick(result, time.perf_counter() - started)
                    backoff.reset()
                    if self.done():
                        break
                except DBAPIError as exc:
                    delay = backoff.take()
                    self._database_failed(exc, delay)
                    time.sleep(delay)
                    continue
                if not result.busy and not self.stopping:
                    self.wait(self.settings.loop_interval)
        except Exception as exc:
            failure = exc
            log.error("%s job %s stopped: %s", self.job_type, self.job_id, job_error(exc))
            raise
        finally:
            self.on_exit(failure)

    def wait(self, seconds: float) -> None:
        """Wait for a wake-up at most `seconds`, looking at `stopping` (set by a signal
        handler) every `STOP_CHECK` seconds, so a stop never waits out a long interval."""
        deadline = time.monotonic() + seconds
        while not self.stopping:
            left = deadline - time.monotonic()
            if left <= 0 or self.waker.wait(min(left, STOP_CHECK)):
                return

    def on_exit(self, failure: BaseException | None = None) -> None:
        """End the job row: `failed` with `failure`'s line if an exception ended the loop,
        else `success`."""
        try:
            self.suspend_spans()
            if failure is None:
                self.finish(JobState.SUCCESS)
            else:
                self.finish(JobState.FAILED, error=job_error(failure))
        except DBAPIError as exc:
            log.warning("could not mark job %s finished: %s", self.job_id, exc)
        finally:
            self.tracing.shutdown()
            self.metrics.shutdown()

    def suspend_spans(self) -> None:
        """End the spans this job owns; unfinished ones are continued by the next driver."""
        if not self.tracing.enabled or self.job_id is None:
            return
        now = self.clock()
        with transaction(self.factory) as session:
            count = spans.suspend_owned_spans(session, self.tracing, self.job_id, now)
        if count:
            log.info("ended the spans of %d unfinished run(s) for continuance", count)

    def end_owned_spans(self, now: dt.datetime) -> None:
        if not self.tracing.enabled:
            return
        with transaction(self.factory) as session:
            spans.end_owned_spans(session, self.tracing, self.job_id, now)

    def retrying(self, step: Callable[[], object]) -> None:
        """`step()` until it gets through, pausing as `Backoff` does after each database
        error (one line each, `_database_failed`); an error once stopping is raised."""

        def retried(exc: BaseException) -> bool:
            return isinstance(exc, DBAPIError) and not self.stopping

        Retrying(
            retry=retry_if_exception(retried),
            wait=Backoff(self.settings).wait,
            before_sleep=lambda state: self._database_failed(
                failure_of(state), state.upcoming_sleep
            ),
            reraise=True,
        )(step)

    def _database_failed(self, exc: BaseException, delay: float) -> None:
        """One line for a failed database step (where, why; never the URL), before a
        pause of `delay` seconds; the whole error, with its statement, at DEBUG."""
        url = self.settings.database_url
        log.warning(
            "database at %s failed: %s; retrying in %gs",
            database_place(url),
            database_reason(exc, url),
            delay,
        )
        log.debug("the database error", exc_info=exc)

    # -- the job row -------------------------------------------------------------------------
    def register(self) -> int:
        now = self.clock()
        with transaction(self.factory) as session:
            self.job_id = job_id = add_job(session, self.job_type, now)
        self._heartbeats.mark(now)
        log.info("%s job %s started", self.job_type, job_id)
        return job_id

    def heartbeat(self, now: dt.datetime, *, force: bool = False) -> None:
        """Refresh the job row's heartbeat; if the row is no longer `running` (another job
        found this one's heartbeat too old and released its runs), `lost_job_row`."""
        if not (force or self._heartbeats.due(now)):
            return
        with transaction(self.factory) as session:
            alive = session.execute(
                update(Job)
                .where(Job.id == self.job_id, Job.state == JobState.RUNNING)
                .values(latest_heartbeat=now)
                .returning(Job.id)
            ).first()
        self._heartbeats.mark(now)  # only once written: a failed beat is tried next tick
        if alive is None:
            self.lost_job_row()

    def lost_job_row(self) -> None:
        """Another job marked this one dead (its heartbeat was late) and released its runs:
        a job that drives runs of its own cannot go on; it stops, with one error line."""
        raise JobLost(
            f"{self.job_type} job {self.job_id} was marked dead by another job (its "
            "heartbeat was late): its runs went on under the schedulers"
        )

    def finish(self, state: JobState = JobState.SUCCESS, *, error: str | None = None) -> None:
        if self.job_id is None:
            return
        with transaction(self.factory) as session:  # a row marked dead stays so
            session.execute(
                update(Job)
                .where(Job.id == self.job_id, Job.state == JobState.RUNNING)
                .values(state=state, end_date=self.clock(), error=error)
            )

    # -- driving runs ------------------------------------------------------------------------
    def runs_i_drive(self) -> ColumnElement[bool]:
        """Which runs this job examines and queues for (`drivable`): one clause object
        per job id, as the statements built from it are cached by it."""
        if self._drivable is None or self._drivable[0] != self.job_id:
            clause = built(f"runs job {self.job_id} drives", self.drivable())
            self._drivable = (self.job_id, clause)
        return self._drivable[1]

    def drivable(self) -> ColumnElement[bool]:
        """Unclaimed runs and this job's own.

        A dead job's runs are unclaimed by `release_dead_jobs`, so they join this set.
        """
        return or_(DagRun.claimed_by_job_id.is_(None), DagRun.claimed_by_job_id == self.job_id)

    def dag_for(self, run: DagRun, dags: dict[str, Dag]) -> Dag | None:
        return dags.get(run.dag_id)

    def examine_runs(
        self, session: Session, now: dt.datetime, result: TickResult, only: set[int] | None = None
    ) -> None:
        """Claim a batch of running runs (SKIP LOCKED) and decide each of them.

        With `only`, just those runs (the ones with news). Runs with news or started
        in this pass that the limit left are handed over after the commit (`hand_over`:
        to the next pass at once, or to whichever scheduler takes them first); those
        another job holds (fewer than the limit claimed) are kept for this job's next
        pass. A pass that started a burst (more than a quarter of the limit) examines a
        quarter of the limit: the rest go at once to whichever scheduler takes them.
        Invariant: runs in the caller's transaction; the claimed rows stay locked until
        it commits, so every decision about a run is made under its lock.
        """
        if only is not None and not only:
            return
        limit = self.settings.runs_per_loop
        if len(self._started_now) > max(limit // 4, 1):
            limit = max(limit // 4, 1)
        runs = claim_runs_to_examine(session, self.runs_i_drive(), limit, only)
        left = (self._started_now if only is None else only) - {run.id for run in runs}
        if len(runs) >= limit:
            self._over_limit |= left
        else:
            self._pending_news |= left
        dags = self.dag_cache.get_many(
            session, [run.dag_id for run in runs], max_age=self.settings.dag_refresh_interval
        )
        tracing = self.tracing.enabled
        fresh = self.decide_fresh(session, runs, dags, now)
        for run in runs:
            dag = self.dag_for(run, dags)
            if dag is None:
                continue
            if run.bundle_version is not None and run.dag_hash != dag.version_hash:
                dag = self.dag_cache.get(session, run.dag_id, run.dag_hash)  # its own version
                if dag is None:
                    continue
            if run.id in fresh:  # its roots scheduled, from its DAG alone
                result.tis_scheduled += fresh[run.id]
                if tracing:
                    spans.finish_spans(session, self.tracing, run, self.job_id, now, None)
                continue
            if tracing and run.span_status == SpanStatus.NEEDS_CONTINUANCE:
                spans.continue_run(session, run, self.job_id, now)
            if self.timed_out(session, run, dag, now):
                result.runs_finished += 1
                continue
            decision = update_state(
                session, run, dag, now, max_map_length=self.settings.max_map_length
            )
            self._to_stop += decision.stop
            if tracing:
                finished = None if decision.finished is None else str(decision.finished)
                spans.finish_spans(session, self.tracing, run, self.job_id, now, finished)
            result.tis_scheduled += len(decision.scheduled)
            result.mapped_expansions += decision.expansions
            result.tis_expanded += decision.indexes
            if decision.finished is not None:
                result.runs_finished += 1
                log.info("run %s.%s %s", run.dag_id, run.run_id, decision.finished)
        result.runs_examined += len(runs)
        result.more_runs = len(runs) >= limit

    def decide_fresh(
        self, session: Session, runs: Sequence[DagRun], dags: dict[str, Dag], now: dt.datetime
    ) -> dict[int, int]:
        """The runs this pass started whose TIs are all `none`, decided from their DAG
        alone (`fresh_runs`: one UPDATE per DAG version for all of them, not a read and a
        write per run); run id → TIs scheduled. The others are left to `update_state`."""
        by_version: dict[str, tuple[tuple[str, ...], list[DagRun]]] = {}
        for run in runs:
            dag = self.dag_for(run, dags) if run.id in self._started_now else None
            if (
                dag is None
                or run.dag_hash != dag.version_hash
                or run.span_status == SpanStatus.NEEDS_CONTINUANCE
                or run_timeout_error(run, dag.serialized, now) is not None
            ):
                continue
            roots = fresh_roots(dag)
            if roots is not None:
                by_version.setdefault(dag.version_hash, (roots, []))[1].append(run)
        decided: dict[int, int] = {}
        for roots, started in by_version.values():
            decided |= schedule_fresh(session, started, roots, now)
        return decided

    def timed_out(self, session: Session, run: DagRun, dag: Dag, now: dt.datetime) -> bool:
        """End `run` as a cancel does if it is past its `dagrun_timeout` (`timeouts`),
        its tries stopped after the commit; whether it was."""
        error = run_timeout_error(run, dag.serialized, now)
        if error is None:
            return False
        done = cancel_runs(session, [run.id], now, error=error)
        self._to_stop += done.attempts
        self._to_revoke += done.external_ids
        log.warning("run %s.%s failed: %s", run.dag_id, run.run_id, error)
        return done.runs > 0

    def stop_taken_tries(self) -> None:
        """After the commit: stop the tries a timeout took (`jobs.stopping`)."""
        if self._to_stop or self._to_revoke:
            stop_tries(self.settings, self._to_stop, self._to_revoke)
            self._to_stop, self._to_revoke = [], []

    def queue(self, session: Session, now: dt.datetime, result: TickResult) -> list[RunMessage]:
        """Queue scheduled TIs within the limits; the messages are sent after the commit.

        Skipped when nothing can have become queueable: no wake-up came (a worker that
        left TIs `scheduled` or freed a slot they want wakes the schedulers), no TI was
        scheduled in this tick and the last pass left nothing behind (a full pool, a
        limit reached).
        """
        due = self._queue_passes.due(now)
        if not (result.tis_scheduled or self._left_behind or self._woken or due):
            return []
        self._queue_passes.mark(now)
        messages, left = queue_scheduled(
            session,
            job_id=self.job_id,
            now=now,
            runs=self.runs_i_drive(),
            with_trace=self.tracing.enabled,
            limited=True,
        )
        self._left_behind = left
        if self.tracing.enabled and messages:
            spans.start_ti_spans(session, [m.ti_id for m in messages], now)
        result.tis_queued += len(messages)
        return messages

    def scheduling_pass(self, now: dt.datetime, result: TickResult) -> None:
        """Examine runs and queue what is ready in ONE transaction, then publish.

        Runs are examined when they have news (a wake-up named them, or this pass
        started them); all of them at least once per loop interval, which also
        catches retries coming due and any wake-up that was lost.
        """
        news = self.waker.take_news()
        only: set[int] | None = None
        self._look_at_everything = news is None
        self._woken = news is None or bool(news)
        if news is None or self._full_passes.due(now):
            self._full_passes.mark(now)
            self._pending_news.clear()
        else:
            only = news | self._pending_news
            self._pending_news = set()
        self._started_now, self._started_at = set(), None
        self._over_limit = set()
        self._to_stop, self._to_revoke = [], []  # only what this pass's commit took
        with transaction(self.factory) as session:
            self.start_or_create(session, now, result)
            now = self._started_at or now  # runs started: the rest of the pass is after them
            if only is not None:
                only |= self._started_now
            self.examine_runs(session, now, result, only)
            messages = self.queue(session, now, result)
        self._runs_finished_last_pass = result.runs_finished > 0
        self.stop_taken_tries()
        if self._over_limit:  # first: another scheduler may take them while this one sends
            self.hand_over(self._over_limit)
        self.after_commit(messages, now)

    def hand_over(self, runs: set[int]) -> None:
        """Runs this pass had to leave (its limit reached): the next pass, at once
        (`more_runs`), examines them. Called after the pass's commit."""
        self._pending_news |= runs

    def start_or_create(self, session: Session, now: dt.datetime, result: TickResult) -> None:
        """Hook: create and start runs inside the scheduling transaction."""

    def after_commit(self, messages: Sequence[RunMessage], now: dt.datetime) -> None:
        self.metrics.observe_queued(messages, now)
        self.send(messages)

    def send(self, messages: Sequence[RunMessage]) -> None:
        """Publish after commit; on a broker error the TIs stay queued and are re-sent later."""
        if not messages:
            return
        try:
            self.publish(messages)
        except Exception as exc:  # broker down: the queued-timeout sweep re-publishes
            log.warning("publishing %d messages failed (%s); will re-publish", len(messages), exc)

    def poll_external_tasks(self, now: dt.datetime) -> None:
        """CeleryTask results, looked at twice a second at most (call before the sweep:
        it refreshes their heartbeats). Every job polls, a backfill too (one run alone,
        `--local`, has no scheduler beside it); TIs are taken SKIP LOCKED, so several
        jobs poll disjoint sets."""
        if not self._polls.take(now):
            return
        poll_once(self.factory, self.settings, now)

    def sweep(self, now: dt.datetime, result: TickResult) -> None:
        """Re-publish TIs nobody claimed; retry or fail TIs whose worker died.

        Each sweep locks what it acts on SKIP LOCKED, so one job acts on each dead thing.
        """
        if not self._sweeps.take(now):
            return
        with transaction(self.factory) as session:
            result.dead_tis = fail_dead_running(
                session, now=now, heartbeat_timeout=self.settings.heartbeat_timeout
            )
        with transaction(self.factory) as session:
            messages = requeue_expired(
                session,
                now=now,
                queued_timeout=self.settings.queued_timeout,
                runs=self.runs_i_drive(),
            )
        result.tis_requeued = len(messages)
        self.send(messages)

    def start_runs(self, session: Session, runs: Sequence[DagRun], now: dt.datetime) -> int:
        """queued → running (compare-and-set); one statement for them all unless each
        run's span values are its own (tracing).

        The runs start at the clock read now, after they were read, not at the pass's
        `now`: a run committed after the pass read its clock (a trigger during the pass)
        was queued after it. The rest of the pass goes on from that time
        (`scheduling_pass`), so no TI of theirs is scheduled before its run started."""
        if not runs:
            return 0
        now = self._started_at = max(self._started_at or now, self.clock())
        values: dict[str, object] = {"started_by_job_id": self.job_id}
        queued = [DagRunState.QUEUED]
        if not self.tracing.enabled:
            started = move_runs(
                session,
                [run.id for run in runs],
                DagRunState.RUNNING,
                expect=queued,
                now=now,
                values=values,
            )
        else:
            started = [
                run.id
                for run in runs
                if move_run(
                    session,
                    run.id,
                    DagRunState.RUNNING,
                    expect=queued,
                    now=now,
                    values={**values, **spans.start_run_span(run, now)},
                )
            ]
        self._started_now.update(started)
        return len(started)
