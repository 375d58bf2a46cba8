"""Results recorded in a transaction: `decided` (the run locked first, its downstream
decided and queued in the same transaction) and `written` (the result alone). A
success's asset events are written in the transaction whose compare-and-set won.

Invariants: the run's row is the first lock `decided` takes, sent with the BEGIN
(`downstream_sql.run_lock`), before the result is written; what it queued is published
after the commit by the caller. A database error is retried (`retrying`): the result is
a compare-and-set, so a retry cannot write it twice.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy.orm import Session

from sluice.broker.worker.result.case import Case, Path, Recorded, store_asset_events
from sluice.broker.worker.retrying import retrying
from sluice.scheduler.core.db import Pipeline, transaction, transaction_opened_by, utcnow
from sluice.scheduler.core.queries.task_logs import save_task_log
from sluice.scheduler.core.states import TI
from sluice.scheduler.core.transitions import move_ti
from sluice.scheduler.decide.downstream import (
    FollowUp,
    locked_run,
    schedule_downstream,
    write_result,
)
from sluice.scheduler.decide.downstream_sql import FanInRow, fan_in_write, run_lock


def decided(case: Case) -> Recorded:
    """The run locked, the result (and its log) written, the downstream decided and
    queued, in one transaction; a run this worker may not decide: the result written and
    the schedulers woken."""
    plan = case.plan
    assert plan is not None

    def write() -> FollowUp | None:
        """What follows the result, in its transaction; None if its compare-and-set lost."""
        now = utcnow()
        opener = Pipeline()
        lock = opener.add(run_lock(case.run_pk), "run lock")
        fan_in = None
        if plan.fan_in is not None:  # the result's UPDATE counts the other upstreams
            fan_in = opener.add(
                fan_in_write(
                    plan,
                    run_pk=case.run_pk,
                    pool=case.pool,
                    ti_id=case.ti_id,
                    new=case.new,
                    attempt_id=case.attempt_id,
                    now=now,
                    values=case.values,
                ),
                "result",
            )
        with transaction_opened_by(case.factory, opener) as (session, opened):
            locked = locked_run(
                plan,
                opened.first(lock),
                run_pk=case.run_pk,
                task_id=case.task_id,
                pool=case.pool,
                dag=case.dag,
            )
            if case.task_log is not None:
                save_task_log(session, case.task_log, now=now)
            fan_in_rows: list[FanInRow] | None = opened[fan_in] if fan_in is not None else None
            if locked is None:  # claimed by a job, another DAG version, spans to continue
                won = (
                    bool(fan_in_rows)
                    if fan_in_rows is not None
                    else move_result(case, session, now)
                )
                if won:
                    store_asset_events(session, case, now)
                return FollowUp(wake=True) if won else None
            known = write_result(
                session,
                locked,
                ti_id=case.ti_id,
                new=case.new,
                attempt_id=case.attempt_id,
                now=now,
                values=case.values,
                fan_in_rows=fan_in_rows,
            )
            if known is None:
                return None
            store_asset_events(session, case, now)
            return schedule_downstream(
                session,
                known,
                finished=case.new,
                result=case.values.get("result"),
                now=now,
                with_trace=case.tracing,
            )

    follow = retrying(write)
    return Recorded(follow is not None, follow, Path.DECIDED)


def written(case: Case) -> Recorded:
    """The result (and its log) written in one transaction; the schedulers decide what
    follows (woken: the downstream was not looked at)."""

    def write() -> bool:
        now = utcnow()
        with transaction(case.factory) as session:
            if case.task_log is not None:
                save_task_log(session, case.task_log, now=now)
            won = move_result(case, session, now)
            if won:
                store_asset_events(session, case, now)
            return won

    return Recorded(retrying(write), None, Path.WRITTEN)


def move_result(case: Case, session: Session, now: dt.datetime) -> bool:
    """The result's compare-and-set alone: running → `case.new` for this attempt."""
    return move_ti(
        session,
        case.ti_id,
        case.new,
        expect=[TI.RUNNING],
        attempt_id=case.attempt_id,
        now=now,
        values=case.values,
    )
