"""Queries over task_instance rows used for queueing and the liveness sweeps.

Lock rule: TIs are taken `FOR UPDATE OF task_instance SKIP LOCKED` in a stable
order; pool rows are locked plainly (`FOR UPDATE`, by name) by whoever queues,
so the slot accounting of two schedulers is serialised and never over-fills.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from sqlalchemy import ColumnElement, Row, func, select
from sqlalchemy.orm import Session

from scheduler.models import DagRun, Pool, TaskInstance
from scheduler.states import TI, TI_ACTIVE, DagRunState

_POOLS = Pool.__table__.c
_TIS = TaskInstance.__table__.c
_LOCK_POOLS = select(_POOLS.name, _POOLS.slots).order_by(_POOLS.name).with_for_update()
_ACTIVE_USAGE = (
    select(
        _TIS.pool,
        _TIS.dag_id,
        func.coalesce(func.sum(_TIS.pool_slots), 0),
        func.count(),
    )
    .where(_TIS.state.in_(sorted(state.value for state in TI_ACTIVE)))
    .group_by(_TIS.pool, _TIS.dag_id)
)
"""Run by every queueing transaction (scheduler pass or worker result): built once."""


def lock_pools(session: Session) -> dict[str, int]:
    """All pools' slots, rows locked FOR UPDATE in name order."""
    return {name: slots for name, slots in session.execute(_LOCK_POOLS).all()}


def used_slots_by_pool(session: Session) -> dict[str, int]:
    stmt = (
        select(TaskInstance.pool, func.coalesce(func.sum(TaskInstance.pool_slots), 0))
        .where(TaskInstance.state.in_(list(TI_ACTIVE)))
        .group_by(TaskInstance.pool)
    )
    return {pool: int(n) for pool, n in session.execute(stmt).all()}


def active_usage(session: Session) -> tuple[dict[str, int], dict[str, int]]:
    """Queued + running TIs in one query: (slots used per pool, TIs per DAG)."""
    by_pool: dict[str, int] = {}
    by_dag: dict[str, int] = {}
    for pool, dag_id, slots, count in session.execute(_ACTIVE_USAGE):
        by_pool[pool] = by_pool.get(pool, 0) + int(slots)
        by_dag[dag_id] = by_dag.get(dag_id, 0) + int(count)
    return by_pool, by_dag


def lock_scheduled_tis(
    session: Session,
    limit: int,
    runs: ColumnElement[bool],
    skip_dags: Sequence[str] = (),
    skip_pools: Sequence[str] = (),
) -> list[Row[Any]]:
    """Scheduled TIs of running runs matching `runs`, by priority then age, locked SKIP LOCKED.

    TIs of `skip_dags` (at their max_active_tasks) and `skip_pools` (full) are left out.
    """
    stmt = (
        select(
            TaskInstance.id,
            TaskInstance.dag_id,
            TaskInstance.run_id,
            TaskInstance.task_id,
            TaskInstance.try_number,
            TaskInstance.queue,
            TaskInstance.pool,
            TaskInstance.pool_slots,
            TaskInstance.context_carrier,
        )
        .join(DagRun, DagRun.id == TaskInstance.dag_run_id)
        .where(TaskInstance.state == TI.SCHEDULED, DagRun.state == DagRunState.RUNNING, runs)
        .order_by(TaskInstance.priority_weight.desc(), TaskInstance.scheduled_at, TaskInstance.id)
        .limit(limit)
        .with_for_update(of=TaskInstance, skip_locked=True)
    )
    if skip_dags:
        stmt = stmt.where(TaskInstance.dag_id.not_in(list(skip_dags)))
    if skip_pools:
        stmt = stmt.where(TaskInstance.pool.not_in(list(skip_pools)))
    rows: list[Row[Any]] = list(session.execute(stmt))
    return rows


def lock_expired_queued(
    session: Session, cutoff: dt.datetime, limit: int, runs: ColumnElement[bool]
) -> Sequence[TaskInstance]:
    """TIs of runs matching `runs` queued before `cutoff` and never claimed, SKIP LOCKED."""
    stmt = (
        select(TaskInstance)
        .join(DagRun, DagRun.id == TaskInstance.dag_run_id)
        .where(TaskInstance.state == TI.QUEUED, TaskInstance.queued_at < cutoff, runs)
        .order_by(TaskInstance.queued_at, TaskInstance.id)
        .limit(limit)
        .with_for_update(of=TaskInstance, skip_locked=True)
    )
    return session.scalars(stmt).all()


def lock_dead_running(session: Session, cutoff: dt.datetime, limit: int) -> Sequence[TaskInstance]:
    """Running TIs whose heartbeat is older than `cutoff`, locked SKIP LOCKED."""
    stmt = (
        select(TaskInstance)
        .where(TaskInstance.state == TI.RUNNING, TaskInstance.last_heartbeat_at < cutoff)
        .order_by(TaskInstance.last_heartbeat_at, TaskInstance.id)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    return session.scalars(stmt).all()
