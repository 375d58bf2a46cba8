"""Queries over dag and dag_run rows used by the scheduling loop.

Lock rule: every claim is `FOR NO KEY UPDATE SKIP LOCKED` with a stable ORDER BY,
so several schedulers take disjoint batches; the lock lasts until the caller's
transaction ends, and every decision about a claimed row is made inside it.
`NO KEY`: the lock excludes every other claim and run lock, but not the foreign-key
check of a write to a row that references it (PostgreSQL checks the key again when a
transaction writes a TI row it already wrote: a worker's or a scheduler's queueing
and then span start), which with a plain `FOR UPDATE` waits on the run's lock while
holding the pool's, against a holder of the run's lock waiting for the pool.
On SQLite the transaction itself is the lock (BEGIN IMMEDIATE).
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Sequence
from typing import Any

from sqlalchemy import ColumnElement, Select, bindparam, func, or_, select
from sqlalchemy.orm import Session

from sluice.scheduler.core.db import executed
from sluice.scheduler.core.hot_sql import built, check_registered, hot, name_of
from sluice.scheduler.core.models import Dag, DagRun
from sluice.scheduler.core.named_sql import hot_statement, same_values
from sluice.scheduler.core.states import DagRunState, RunType


def lock_due_dags(session: Session, now: dt.datetime, limit: int) -> Sequence[Dag]:
    """Active, unpaused DAGs whose next run is due and that have room for it (fewer
    queued and running runs than max_active_runs), locked SKIP LOCKED."""
    active = (
        select(func.count())
        .where(
            DagRun.dag_id == Dag.dag_id,
            DagRun.state.in_([DagRunState.QUEUED.value, DagRunState.RUNNING.value]),
            DagRun.run_type != RunType.BACKFILL.value,
        )
        .scalar_subquery()
    )
    stmt = (
        select(Dag)
        .where(
            Dag.is_active.is_(True),
            Dag.is_paused.is_(False),
            Dag.next_dagrun_create_after.is_not(None),
            Dag.next_dagrun_create_after <= now,
            active < Dag.max_active_runs,
        )
        .order_by(Dag.next_dagrun_create_after, Dag.dag_id)
        .limit(limit)
        .with_for_update(skip_locked=True, key_share=True)
    )
    return session.scalars(stmt).all()


# Statements of the scheduling loop's steps, built once (building a statement costs
# about as much as running it).
_DAGS_WITH_QUEUED_RUNS = select(DagRun.dag_id).where(DagRun.state == DagRunState.QUEUED).distinct()
_LOCK_DAGS = (
    select(Dag)
    .where(Dag.dag_id.in_(bindparam("dag_ids", expanding=True)))
    .order_by(Dag.dag_id)
    .with_for_update(skip_locked=True, key_share=True)
)
_RUNNING_RUNS = (
    select(DagRun.dag_id, func.count())
    .where(
        DagRun.dag_id.in_(bindparam("dag_ids", expanding=True)),
        DagRun.state == DagRunState.RUNNING,
        DagRun.run_type != bindparam("not_type"),
    )
    .group_by(DagRun.dag_id)
)


def dags_with_queued_runs(session: Session) -> Sequence[str]:
    return session.scalars(_DAGS_WITH_QUEUED_RUNS).all()


def lock_dags(session: Session, dag_ids: Sequence[str]) -> Sequence[Dag]:
    """Lock DAG rows SKIP LOCKED, ordered by dag_id: the guard for max_active_runs."""
    if not dag_ids:
        return []
    return session.scalars(_LOCK_DAGS, {"dag_ids": list(dag_ids)}).all()


def count_running_runs(
    session: Session, dag_ids: Sequence[str], not_type: RunType | None = None
) -> dict[str, int]:
    """Running runs per DAG (leaving out runs of `not_type`)."""
    params = {"dag_ids": list(dag_ids), "not_type": not_type or ""}
    return {dag_id: n for dag_id, n in session.execute(_RUNNING_RUNS, params).all()}


_ACTIVE_RUNS = hot(
    "active runs of a DAG (SQLite)",
    select(func.count().label("active")).where(
        DagRun.dag_id == bindparam("dag_id"),
        DagRun.state.in_([DagRunState.QUEUED.value, DagRunState.RUNNING.value]),
        DagRun.run_type != RunType.BACKFILL.value,
    ),
    twin=True,
)
ACTIVE_RUNS_OF_A_DAG = hot_statement("active_runs_of_a_dag", same_values(_ACTIVE_RUNS))
"""scheduler/core/sql/scheduling.sql; on SQLite its twin."""


def count_active_runs(session: Session, dag_id: str) -> int:
    """Queued and running runs of `dag_id`, its backfill runs left out."""
    (row,) = executed(session, (ACTIVE_RUNS_OF_A_DAG, {"dag_id": dag_id}))
    return int(row.active)


def queued_runs_of(
    session: Session,
    dag_id: str,
    limit: int,
    *,
    claimable_by: int | None,
    only_type: RunType | None = None,
) -> Sequence[DagRun]:
    """Queued runs of a DAG, oldest logical date first, unclaimed or claimed by `claimable_by`."""
    stmt = (
        select(DagRun)
        .where(DagRun.dag_id == dag_id, DagRun.state == DagRunState.QUEUED)
        .order_by(DagRun.logical_date, DagRun.id)
        .limit(limit)
    )
    if only_type is not None:
        stmt = stmt.where(DagRun.run_type == only_type)
    stmt = stmt.where(
        or_(DagRun.claimed_by_job_id.is_(None), DagRun.claimed_by_job_id == claimable_by)
    )
    return session.scalars(stmt).all()


def claim_runs_to_examine(
    session: Session, drivable: ColumnElement[bool], limit: int, only: set[int] | None = None
) -> Sequence[DagRun]:
    """Running runs matching `drivable` (which runs this job may drive; the same object
    from call to call, statements are cached by it) and, with `only`, among those ids,
    locked SKIP LOCKED.

    Ordered by the oldest scheduling decision first, so no run starves.
    """
    stmt = _claim_statement(drivable, only is not None)
    params: dict[str, Any] = {"limit": limit}
    if only is not None:
        params["only"] = sorted(only)
    return session.scalars(stmt, params).all()


@functools.lru_cache(maxsize=16)
def _claim_statement(drivable: ColumnElement[bool], among: bool) -> Select[DagRun]:
    check_registered(drivable, "the run claims' statement cache")
    stmt = (
        select(DagRun)
        .where(DagRun.state == DagRunState.RUNNING, drivable)
        .order_by(DagRun.last_scheduling_decision.asc().nulls_first(), DagRun.id)
        .limit(bindparam("limit"))
        .with_for_update(of=DagRun, skip_locked=True, key_share=True)
    )
    if among:
        stmt = stmt.where(DagRun.id.in_(bindparam("only", expanding=True)))
    return built(f"claim runs of {name_of(drivable)}{' among some' if among else ''}", stmt)
