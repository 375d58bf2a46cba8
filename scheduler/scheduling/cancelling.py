"""Cancelling runs: every unfinished task instance ends and the run ends `failed`.

What each unfinished TI becomes: one that never started (`none`, `scheduled`) is
`skipped`; one that had or has a try (`queued`, `running`, `up_for_retry`) is `failed`
with the error "cancelled", so a run's page shows which tries were stopped. A late result
of a stopped try loses its compare-and-set (its attempt is no longer `running`).

The functions take the caller's session (the run rows locked FOR NO KEY UPDATE, as every
writer of a run's TIs takes them first) and never commit; the caller stops the tries
after its commit (`Cancelled.attempts` to revoke, `external_ids` of CeleryTask tries).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session

from sluice.scheduler.core.models import DagRun, TaskInstance
from sluice.scheduler.core.states import TI, TI_PARKED, DagRunState, SpanStatus
from sluice.scheduler.core.transitions import move_run, move_spans, move_tis

CANCELLED = "cancelled"
"""The error of a try stopped by a cancellation."""


@dataclass
class Cancelled:
    """What `cancel_runs` did: runs ended, and the tries to stop after the commit."""

    runs: int = 0
    task_ids: list[str] = field(default_factory=list)
    """The task ids of the TIs it ended (skipped ones first, then failed ones, per run)."""
    attempts: list[str] = field(default_factory=list)
    """The Celery task ids of the tries that were queued or running."""
    external_ids: list[str] = field(default_factory=list)
    """The external Celery tasks of the CeleryTask tries that were running."""


def cancel_runs(
    session: Session, run_pks: Sequence[int], now: dt.datetime, error: str = CANCELLED
) -> Cancelled:
    """End the unfinished runs among `run_pks` and their unfinished TIs (module doc);
    `error` is the stopped tries' error."""
    done = Cancelled()
    runs = session.scalars(
        select(DagRun)
        .where(
            DagRun.id.in_(list(run_pks)),
            DagRun.state.in_([DagRunState.QUEUED, DagRunState.RUNNING]),
        )
        .order_by(DagRun.id)
        .with_for_update(key_share=True)
        .execution_options(populate_existing=True)  # the state as locked, not as loaded
    ).all()
    for run in runs:
        tis = session.scalars(
            select(TaskInstance)
            .where(
                TaskInstance.dag_run_id == run.id,
                TaskInstance.state.in_([TI.NONE, TI.SCHEDULED, TI.QUEUED, TI.RUNNING, *TI_PARKED]),
            )
            .execution_options(populate_existing=True)
        ).all()
        started = [ti for ti in tis if ti.state in (TI.QUEUED, TI.RUNNING, *TI_PARKED)]
        done.attempts += [
            ti.attempt_id for ti in started if ti.attempt_id and ti.state not in TI_PARKED
        ]
        done.external_ids += [
            ti.external_id for ti in started if ti.external_id and ti.state == TI.RUNNING
        ]
        skipped = move_tis(
            session,
            [ti.id for ti in tis if ti.state in (TI.NONE, TI.SCHEDULED)],
            TI.SKIPPED,
            expect=[TI.NONE, TI.SCHEDULED],
            now=now,
        )
        failed = move_tis(
            session,
            [ti.id for ti in started],
            TI.FAILED,
            expect=[TI.QUEUED, TI.RUNNING, *TI_PARKED],
            now=now,
            values={"error": error, "next_retry_at": None},
        )
        task_of = {ti.id: ti.task_id for ti in tis}
        done.task_ids += [task_of[i] for i in [*skipped, *failed]]
        if move_run(session, run.id, DagRunState.FAILED, expect=[run.state], now=now):
            done.runs += 1
        # the spans' owner ends them (a scheduler's pass no longer examines the run)
        move_spans(
            session,
            TaskInstance,
            [ti.id for ti in tis],
            SpanStatus.SHOULD_END,
            expect=[SpanStatus.ACTIVE],
        )
        move_spans(session, DagRun, [run.id], SpanStatus.SHOULD_END, expect=[SpanStatus.ACTIVE])
    return done
