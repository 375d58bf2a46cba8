"""Deleting old history: finished runs that ended before a date, with everything that
hangs off them (`sluice db clean`, as Airflow's `db clean`).

Only runs in `success` or `failed` whose `end_date` is before the cut, and none of whose
callbacks is still to be delivered (`pending`, `queued` or `running`), are touched: a
queued or running run never is, and a run whose alert has not gone out yet is kept whole
(the callback reads its run, its TIs' error and log) until a later clean finds its
callbacks `delivered` or `failed`. Deletion goes in batches, each its own transaction:
the batch's runs are locked first (`FOR UPDATE SKIP LOCKED`, so a run a scheduler, worker
or user holds is left for the next batch, and a clear waiting on it finds it gone),
checked again to be finished, old and without callbacks to deliver, then their task
logs, task instances (by the run's foreign key), finished callbacks and audit events
(named by dag and run id) and the runs themselves go. A crash between batches leaves
whole runs, never half of one.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlalchemy import ColumnElement, Row, delete, exists, func, select
from sqlalchemy.orm import Session, sessionmaker

from sluice.scheduler.core.callback_kinds import Status
from sluice.scheduler.core.db import transaction
from sluice.scheduler.core.models import (
    AuditEvent,
    DagRun,
    DueCallback,
    TaskInstance,
    TaskLog,
    TaskTry,
)
from sluice.scheduler.core.states import RUN_TERMINAL

BATCH = 500
"""Runs deleted per transaction."""


def _ended_before(before: dt.datetime) -> list[ColumnElement[bool]]:
    return [DagRun.state.in_(sorted(RUN_TERMINAL)), DagRun.end_date < before]


def _undelivered() -> ColumnElement[bool]:
    """The run has a callback still to deliver (found through the callbacks' status
    index: the unfinished ones are few)."""
    return exists().where(
        DueCallback.status.in_(Status.UNFINISHED),
        DueCallback.dag_id == DagRun.dag_id,
        DueCallback.run_id == DagRun.run_id,
    )


def _expired(before: dt.datetime) -> list[ColumnElement[bool]]:
    """A run `db clean` deletes: finished before `before`, no callback left to deliver."""
    return [*_ended_before(before), ~_undelivered()]


def awaiting_callbacks(session: Session, before: dt.datetime) -> int:
    """The finished runs that ended before `before` but are kept: a callback of theirs is
    still to be delivered (a plain read)."""
    return int(
        session.scalar(
            select(func.count()).select_from(DagRun).where(*_ended_before(before), _undelivered())
        )
        or 0
    )


@dataclass(frozen=True)
class ExpiredDag:
    """What `db clean` would delete of one DAG: its runs, their TIs, their end dates."""

    dag_id: str
    runs: int
    task_instances: int
    oldest_end: dt.datetime
    newest_end: dt.datetime


def expired_by_dag(session: Session, before: dt.datetime) -> list[ExpiredDag]:
    """The finished runs that ended before `before`, counted per DAG (a plain read)."""
    tis = (
        select(func.count())
        .where(TaskInstance.dag_run_id == DagRun.id)
        .correlate(DagRun)
        .scalar_subquery()
    )
    rows = session.execute(
        select(
            DagRun.dag_id,
            func.count(),
            func.coalesce(func.sum(tis), 0),
            func.min(DagRun.end_date),
            func.max(DagRun.end_date),
        )
        .where(*_expired(before))
        .group_by(DagRun.dag_id)
        .order_by(DagRun.dag_id)
    ).all()
    return [ExpiredDag(d, int(n), int(t), lo, hi) for d, n, t, lo, hi in rows]


@dataclass
class Deleted:
    runs: int = 0
    task_instances: int = 0


def delete_expired(
    factory: sessionmaker[Session],
    before: dt.datetime,
    *,
    batch: int = BATCH,
    progress: Callable[[Deleted], None] | None = None,
) -> Deleted:
    """Delete the finished runs that ended before `before`, `batch` runs a transaction,
    until none is left that no one holds; what was deleted."""
    done = Deleted()
    while True:
        with transaction(factory) as session:
            run_rows = session.execute(
                select(DagRun.id, DagRun.dag_id, DagRun.run_id)
                .where(*_expired(before))
                .order_by(DagRun.id)
                .limit(batch)
                .with_for_update(skip_locked=True)
            ).all()
            if not run_rows:
                return done
            done.task_instances += _delete_runs(session, run_rows)
            done.runs += len(run_rows)
        if progress is not None:
            progress(done)


def _delete_runs(session: Session, run_rows: Sequence[Row[int, str, str]]) -> int:
    """Delete the locked runs `run_rows` (id, dag_id, run_id) and what hangs off them;
    how many TIs went."""
    run_pks = [r.id for r in run_rows]
    ti_ids = select(TaskInstance.id).where(TaskInstance.dag_run_id.in_(run_pks))
    for kept in (TaskLog, TaskTry):  # SQLite enforces no ON DELETE CASCADE by default
        session.execute(delete(kept).where(kept.ti_id.in_(ti_ids)))
    tis = session.execute(delete(TaskInstance).where(TaskInstance.dag_run_id.in_(run_pks)))
    for dag_id, run_ids in _by_dag(run_rows).items():
        session.execute(
            delete(DueCallback).where(
                DueCallback.dag_id == dag_id,
                DueCallback.run_id.in_(run_ids),
                DueCallback.status.in_(Status.FINISHED),
            )
        )
        session.execute(
            delete(AuditEvent).where(AuditEvent.dag_id == dag_id, AuditEvent.run_id.in_(run_ids))
        )
    session.execute(delete(DagRun).where(DagRun.id.in_(run_pks)))
    return int(getattr(tis, "rowcount", 0) or 0)


def _by_dag(run_rows: Sequence[Row[int, str, str]]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for row in run_rows:
        found.setdefault(row.dag_id, []).append(row.run_id)
    return found
