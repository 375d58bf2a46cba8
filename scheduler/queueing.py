"""Moving `scheduled` TIs to `queued` within the limits, and the sweeps that re-queue.

Invariants:
- `queue_scheduled` runs in one transaction that first locks every pool row
  (FOR UPDATE, by name): slot and max_active_tasks accounting happens under that
  lock, so two schedulers never over-fill a pool. TIs are then taken SKIP LOCKED.
- Messages are returned, not sent: the caller commits first and publishes after,
  so a worker never sees a TI that is not yet `queued` in the database.
- A fresh `attempt_id` (the Celery task id) is given at every queueing; a
  re-publish of an unclaimed TI keeps it, so the worker's compare-and-set keeps
  it to one execution.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from typing import Any

from sqlalchemy import ColumnElement, select, update
from sqlalchemy.orm import Session

from broker.messages import RunMessage
from scheduler.models import Dag, TaskInstance
from scheduler.queries.tis import (
    active_usage,
    lock_dead_running,
    lock_expired_queued,
    lock_pools,
    lock_scheduled_tis,
)
from scheduler.states import TI
from scheduler.transitions import fail_try, queue_tis

log = logging.getLogger("sluice.queueing")


def queue_scheduled(
    session: Session,
    *,
    job_id: int | None,
    now: dt.datetime,
    runs: ColumnElement[bool],
    limit: int = 512,
    with_trace: bool = False,
) -> tuple[list[RunMessage], bool]:
    """Queue as many scheduled TIs (of runs matching `runs`) as pools and limits allow.

    Returns the messages to send after commit, and whether scheduled TIs were left
    behind (a pool or limit was full, or the batch limit was reached). With
    `with_trace`, each message carries its TI's span carrier for the headers.
    """
    slots = lock_pools(session)
    used, active = active_usage(session)
    max_tasks: dict[str, int] = {
        dag_id: n
        for dag_id, n in session.execute(
            select(Dag.dag_id, Dag.max_active_tasks).where(Dag.dag_id.in_(list(active)))
        )
    }
    # Fairness: a DAG at its max_active_tasks or a full pool is left out of the batch,
    # so its scheduled TIs cannot fill the batch and starve other DAGs and pools.
    full_dags = [d for d, n in active.items() if n >= max_tasks.get(d, 0)]
    full_pools = [p for p, n in used.items() if n >= slots.get(p, 0)]
    candidates = lock_scheduled_tis(session, limit, runs, full_dags, full_pools)
    if not candidates:
        return [], False
    missing = {row.dag_id for row in candidates} - set(max_tasks)
    if missing:
        rows = session.execute(
            select(Dag.dag_id, Dag.max_active_tasks).where(Dag.dag_id.in_(missing))
        )
        max_tasks.update({dag_id: n for dag_id, n in rows})
    assignments: list[tuple[int, str]] = []
    messages: list[RunMessage] = []
    for row in candidates:
        free = slots.get(row.pool, 0) - used.get(row.pool, 0)
        if row.pool_slots > free:
            continue
        if active.get(row.dag_id, 0) >= max_tasks.get(row.dag_id, 0):
            continue
        used[row.pool] = used.get(row.pool, 0) + row.pool_slots
        active[row.dag_id] = active.get(row.dag_id, 0) + 1
        attempt_id = str(uuid.uuid4())
        assignments.append((row.id, attempt_id))
        messages.append(
            RunMessage(
                ti_id=row.id,
                attempt_id=attempt_id,
                dag_id=row.dag_id,
                run_id=row.run_id,
                task_id=row.task_id,
                try_number=row.try_number + 1,
                queue=row.queue,
                trace=row.context_carrier if with_trace else {},
            )
        )
    queue_tis(session, assignments, now=now, job_id=job_id)
    return messages, len(messages) < len(candidates) or len(candidates) >= limit


def requeue_expired(
    session: Session,
    *,
    now: dt.datetime,
    queued_timeout: float,
    runs: ColumnElement[bool],
    limit: int = 512,
) -> list[RunMessage]:
    """TIs queued longer than `queued_timeout` with no worker: publish again, same attempt_id.

    The queued_at stamp is renewed so the next sweep waits a full timeout again.
    """
    cutoff = now - dt.timedelta(seconds=queued_timeout)
    expired = lock_expired_queued(session, cutoff, limit, runs)
    messages = [message_for(ti) for ti in expired if ti.attempt_id]
    if expired:
        session.execute(
            update(TaskInstance)
            .where(TaskInstance.id.in_([ti.id for ti in expired]), TaskInstance.state == TI.QUEUED)
            .values(queued_at=now)
            .execution_options(synchronize_session=False)
        )
        log.warning("re-publishing %d TIs queued for over %ss", len(messages), queued_timeout)
    return messages


def fail_dead_running(
    session: Session, *, now: dt.datetime, heartbeat_timeout: float, limit: int = 512
) -> int:
    """Running TIs whose heartbeat stopped go to up_for_retry or failed, by their tries."""
    cutoff = now - dt.timedelta(seconds=heartbeat_timeout)
    dead = lock_dead_running(session, cutoff, limit)
    if not dead:
        return 0
    specs: dict[str, dict[str, Any]] = {
        dag_id: spec
        for dag_id, spec in session.execute(
            select(Dag.dag_id, Dag.serialized).where(Dag.dag_id.in_({t.dag_id for t in dead}))
        )
    }
    error = f"the worker stopped heartbeating for over {heartbeat_timeout:g}s"
    for ti in dead:
        task_spec = specs.get(ti.dag_id, {}).get("tasks", {}).get(ti.task_id)
        fail_try(session, ti, task_spec, now, error)
        log.warning("TI %s.%s.%s: %s", ti.dag_id, ti.run_id, ti.task_id, error)
    return len(dead)


def message_for(ti: TaskInstance) -> RunMessage:
    assert ti.attempt_id is not None
    return RunMessage(
        ti_id=ti.id,
        attempt_id=ti.attempt_id,
        dag_id=ti.dag_id,
        run_id=ti.run_id,
        task_id=ti.task_id,
        try_number=ti.try_number,
        queue=ti.queue,
        trace=ti.context_carrier,
    )
