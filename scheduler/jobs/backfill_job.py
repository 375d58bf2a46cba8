"""BackfillJob: creates `backfill` runs for a range of dates and drives them to the end.

It is a DagRunJob like the scheduler: the same claim, the same `update_state`,
the same queue/publish path. Its runs carry `claimed_by_job_id` = its job id,
so schedulers skip them while its heartbeat is fresh; if it dies, a scheduler
releases them (see `queries.jobs.release_dead_jobs`) and finishes them. On
Ctrl-C it releases them itself.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import ColumnElement, func, select, update
from sqlalchemy.orm import Session, sessionmaker

from sluice.scheduler.core.db import transaction, utcnow
from sluice.scheduler.core.models import Dag, DagRun, TaskInstance
from sluice.scheduler.core.settings import Settings
from sluice.scheduler.core.states import (
    RUN_TERMINAL,
    RUN_UNFINISHED,
    TI,
    TI_TERMINAL,
    DagRunState,
    JobState,
    RunType,
)
from sluice.scheduler.core.tracing import Tracing
from sluice.scheduler.jobs.base import DagRunJob, JobLost, Publish, job_error
from sluice.scheduler.jobs.tick import TickResult
from sluice.scheduler.scheduling.clearing import clear_task_instances
from sluice.scheduler.scheduling.dagrun import create_dagrun

log = logging.getLogger(__name__)

RUNS_PER_BATCH = 500
"""Runs a backfill creates per transaction (with a heartbeat between two)."""


@dataclass
class Progress:
    runs_total: int = 0
    runs_done: int = 0
    tasks_total: int = 0
    tasks_done: int = 0
    states: dict[str, int] = field(default_factory=dict)


ProgressHook = Callable[[Progress], None]


class BackfillJob(DagRunJob):
    job_type = "backfill"

    def __init__(
        self,
        settings: Settings,
        factory: sessionmaker[Session],
        publish: Publish,
        waker: Any,
        *,
        dag_id: str,
        dates: Sequence[dt.datetime],
        rerun_failed: bool = False,
        max_active_runs: int | None = None,
        local_dag: Dag | None = None,
        on_progress: ProgressHook | None = None,
        clock: Callable[[], dt.datetime] = utcnow,
        tracing: Tracing | None = None,
    ) -> None:
        super().__init__(settings, factory, publish, waker, clock, tracing)
        self.dag_id = dag_id
        self.dates = list(dates)
        self.rerun_failed = rerun_failed
        self.max_active_runs = max_active_runs
        self.local_dag = local_dag
        self.on_progress = on_progress
        self.run_pks: list[int] = []
        self.skipped_dates: list[dt.datetime] = []
        self._finished = False
        self.lost: JobLost | None = None
        """Set when a scheduler marked this job dead while it ran (its runs went on)."""

    # -- what this job drives ----------------------------------------------------------------
    def drivable(self) -> ColumnElement[bool]:
        return DagRun.claimed_by_job_id == self.job_id

    def dag_for(self, run: DagRun, dags: dict[str, Dag]) -> Dag | None:
        return self.local_dag or dags.get(run.dag_id)

    def prepare(self) -> None:
        """Create (or, with rerun_failed, reset) one claimed backfill run per date, in
        transactions of RUNS_PER_BATCH runs with a heartbeat between them: a backfill of
        decades neither holds one huge transaction nor looks dead to the schedulers."""
        if self.job_id is None:
            self.retrying(self.register)
        for start in range(0, len(self.dates), RUNS_PER_BATCH):
            batch = self.dates[start : start + RUNS_PER_BATCH]
            self.retrying(lambda batch=batch: self._prepare_batch(batch))  # type: ignore[misc]
            self.heartbeat(self.clock(), force=True)
            if self.stopping or self.lost is not None:
                break
        log.info(
            "backfill of %s: %d run(s), %d date(s) skipped (already have a run)",
            self.dag_id,
            len(self.run_pks),
            len(self.skipped_dates),
        )

    def _prepare_batch(self, dates: Sequence[dt.datetime]) -> None:
        now = self.clock()
        made: list[int] = []
        skipped: list[dt.datetime] = []
        with transaction(self.factory) as session:
            dag = session.get(Dag, self.dag_id)
            assert dag is not None
            if self.local_dag is not None:
                dag = self.local_dag
            existing = {
                run.logical_date: run
                for run in session.scalars(
                    select(DagRun).where(
                        DagRun.dag_id == self.dag_id, DagRun.logical_date.in_(dates)
                    )
                )
            }
            for date in dates:
                run = existing.get(date)
                if run is None:
                    new = create_dagrun(
                        session,
                        dag,
                        run_type=RunType.BACKFILL,
                        logical_date=date,
                        now=now,
                        claimed_by_job_id=self.job_id,
                    )
                    made.append(new.id)
                elif self.rerun_failed and run.state == DagRunState.FAILED:
                    self._reset_failed(session, run, dag, now)
                    made.append(run.id)
                else:
                    skipped.append(date)
        self.run_pks.extend(made)  # only once committed: a retried batch is not counted twice
        self.skipped_dates.extend(skipped)

    def _reset_failed(self, session: Session, run: DagRun, dag: Dag, now: dt.datetime) -> None:
        """Clear the failed and upstream_failed TIs as `sluice tasks clear` does; claim the run."""
        failed = session.scalars(
            select(TaskInstance.task_id).where(
                TaskInstance.dag_run_id == run.id,
                TaskInstance.state.in_([TI.FAILED, TI.UPSTREAM_FAILED]),
            )
        ).all()
        clear_task_instances(session, run, dag, failed, downstream=False, now=now)
        session.execute(
            update(DagRun)
            .where(DagRun.id == run.id)
            .values(claimed_by_job_id=self.job_id)
            .execution_options(synchronize_session=False)
        )

    # -- the loop ----------------------------------------------------------------------------
    def tick(self, now: dt.datetime) -> TickResult:
        result = TickResult()
        self.heartbeat(now)
        self.scheduling_pass(now, result)
        self.poll_external_tasks(now)
        self.sweep(now, result)
        self.end_owned_spans(now)
        self.report(now)
        return result

    def done(self) -> bool:
        return self._finished or self.lost is not None

    def lost_job_row(self) -> None:
        """Marked dead by a scheduler while running: its runs went on under the
        schedulers; this backfill stops (the CLI says so in one line)."""
        self.lost = JobLost(
            f"backfill job {self.job_id} was marked dead by a scheduler (its heartbeat was "
            "late): its runs go on under the schedulers"
        )

    def start_or_create(self, session: Session, now: dt.datetime, result: TickResult) -> None:
        result.runs_started = self.start_own_runs(session, now)

    def start_own_runs(self, session: Session, now: dt.datetime) -> int:
        dag = session.get(Dag, self.dag_id)
        limit = self.max_active_runs or (dag.max_active_runs if dag else 16)
        running = (
            session.scalar(
                select(func.count()).where(
                    DagRun.claimed_by_job_id == self.job_id,
                    DagRun.state == DagRunState.RUNNING,
                )
            )
            or 0
        )
        room = limit - running
        if room <= 0:
            return 0
        runs = session.scalars(
            select(DagRun)
            .where(
                DagRun.claimed_by_job_id == self.job_id,
                DagRun.state == DagRunState.QUEUED,
            )
            .order_by(DagRun.logical_date)
            .limit(room)
            .with_for_update(skip_locked=True, key_share=True)
        ).all()
        return self.start_runs(session, runs, now)

    def report(self, now: dt.datetime) -> Progress:
        with self.factory() as session:
            run_states = session.execute(
                select(DagRun.state, func.count())
                .where(DagRun.id.in_(self.run_pks))
                .group_by(DagRun.state)
            ).all()
            ti_states = session.execute(
                select(TaskInstance.state, func.count())
                .where(TaskInstance.dag_run_id.in_(self.run_pks))
                .group_by(TaskInstance.state)
            ).all()
        progress = Progress(
            runs_total=len(self.run_pks),
            runs_done=sum(n for s, n in run_states if s in RUN_TERMINAL),
            tasks_total=sum(n for _, n in ti_states),
            tasks_done=sum(n for s, n in ti_states if s in TI_TERMINAL),
            states={str(s): n for s, n in ti_states},
        )
        self._finished = progress.runs_done >= progress.runs_total
        if self.on_progress is not None:
            self.on_progress(progress)
        return progress

    def outcome(self) -> dict[str, str]:
        """run_id → final state of every run this backfill drove."""
        with self.factory() as session:
            rows = session.execute(
                select(DagRun.run_id, DagRun.state).where(DagRun.id.in_(self.run_pks))
            ).all()
        return {run_id: str(state) for run_id, state in rows}

    def on_exit(self, failure: BaseException | None = None) -> None:
        """Release unfinished runs to the schedulers, then close the job row: `success`
        when every run finished, else `failed` (with `failure`'s line if an exception
        ended the loop)."""
        try:
            with transaction(self.factory) as session:
                released = session.execute(
                    update(DagRun)
                    .where(
                        DagRun.claimed_by_job_id == self.job_id,
                        DagRun.state.in_(list(RUN_UNFINISHED)),
                    )
                    .values(claimed_by_job_id=None)
                    .execution_options(synchronize_session=False)
                )
                count = int(getattr(released, "rowcount", 0) or 0)
            if count:
                log.warning("released %d unfinished run(s) to the schedulers", count)
                self.waker.wake()
            self.suspend_spans()
            if failure is not None:
                self.finish(JobState.FAILED, error=job_error(failure))
            else:
                self.finish(JobState.SUCCESS if self._finished else JobState.FAILED)
        except Exception as exc:  # the heartbeat timeout releases them anyway
            log.warning("could not release runs of backfill job %s: %s", self.job_id, exc)
        finally:
            self.tracing.shutdown()
            self.metrics.shutdown()
