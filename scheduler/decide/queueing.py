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
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from sqlalchemy import ColumnElement, update
from sqlalchemy.orm import Session

from sluice.scheduler.core.messages import RunMessage
from sluice.scheduler.core.models import TaskInstance
from sluice.scheduler.core.queries.tis import (
    active_usage,
    lock_dead_running,
    lock_expired_queued,
    lock_pools,
    lock_scheduled_tis,
)
from sluice.scheduler.core.queries.versions import task_specs_of
from sluice.scheduler.core.states import TI
from sluice.scheduler.core.transitions import fail_try, queue_tis
from sluice.scheduler.decide.limited import lock_limited
from sluice.scheduler.decide.limited import save as save_limits

log = logging.getLogger(__name__)


@dataclass
class Capacity:
    """Pool slots, active TIs per DAG and those DAGs' limits, read with every pool row
    locked FOR UPDATE: what queueing in this transaction may still take (`take` books it)."""

    slots: dict[str, int]
    used: dict[str, int]
    active: dict[str, int]
    max_tasks: dict[str, int] = field(default_factory=dict)
    """max_active_tasks of the DAGs with active TIs (others: learnt from their TIs' rows)."""

    @classmethod
    def locked(cls, session: Session) -> Capacity:
        slots = lock_pools(session)
        usage = active_usage(session)
        return cls(slots, usage.slots_by_pool, usage.tis_by_dag, usage.max_active_tasks)

    def take(self, pool: str, pool_slots: int, dag_id: str, max_active_tasks: int) -> bool:
        """Book one TI if its pool has `pool_slots` free and its DAG is under its limit."""
        if pool_slots > self.slots.get(pool, 0) - self.used.get(pool, 0):
            return False
        if self.active.get(dag_id, 0) >= max_active_tasks:
            return False
        self.used[pool] = self.used.get(pool, 0) + pool_slots
        self.active[dag_id] = self.active.get(dag_id, 0) + 1
        return True


class QueuedRow(Protocol):
    """A row of a TI just queued: what its message needs (the try number before the
    queueing bumped it)."""

    id: int
    task_id: str
    try_number: int
    queue: str

    @property
    def context_carrier(self) -> dict[str, Any] | None: ...


def new_try_message(
    row: QueuedRow, attempt_id: str, *, dag_id: str, run_id: str, with_trace: bool
) -> RunMessage:
    """The message of a TI just queued for its next try (`row`: its id, task_id,
    try_number before the bump, queue and span carrier)."""
    return RunMessage(
        ti_id=row.id,
        attempt_id=attempt_id,
        dag_id=dag_id,
        run_id=run_id,
        task_id=row.task_id,
        try_number=row.try_number + 1,
        queue=row.queue,
        trace=(row.context_carrier or {}) if with_trace else {},
    )


def queue_scheduled(
    session: Session,
    *,
    job_id: int | None,
    now: dt.datetime,
    runs: ColumnElement[bool],
    limit: int = 512,
    with_trace: bool = False,
    limited: bool = False,
) -> tuple[list[RunMessage], bool]:
    """Queue as many scheduled TIs (of runs matching `runs`) as pools and limits allow.

    Returns the messages to send after commit, and whether scheduled TIs were left
    behind (a pool or limit was full, or the batch limit was reached). With
    `with_trace`, each message carries its TI's span carrier for the headers. With
    `limited` (a scheduler's pass), the TIs waiting for a concurrency key's slot or a
    rate limit's token are queued first, as their limits allow (`decide.limited`).
    """
    capacity = Capacity.locked(session)
    done: list[RunMessage] = []
    waiting = False
    if limited:
        done, waiting = _queue_limited(session, capacity, job_id, now, runs, limit, with_trace)
    messages, left = _queue_unlimited(session, capacity, job_id, now, runs, limit, with_trace)
    return done + messages, left or waiting


def _free(capacity: Capacity) -> int:
    """The free pool slots: no more candidates than that, each taking one at least (a
    wide map's thousands of scheduled indexes are not all locked to queue the few that
    fit)."""
    return sum(max(0, n - capacity.used.get(p, 0)) for p, n in capacity.slots.items())


def _full(capacity: Capacity) -> tuple[list[str], list[str]]:
    """The DAGs at their max_active_tasks and the full pools: left out of a batch, so
    their scheduled TIs cannot fill it and starve other DAGs and pools."""
    full_dags = [d for d, n in capacity.active.items() if n >= capacity.max_tasks.get(d, 0)]
    full_pools = [p for p, n in capacity.used.items() if n >= capacity.slots.get(p, 0)]
    return full_dags, full_pools


def _queue_limited(
    session: Session,
    capacity: Capacity,
    job_id: int | None,
    now: dt.datetime,
    runs: ColumnElement[bool],
    limit: int,
    with_trace: bool,
) -> tuple[list[RunMessage], bool]:
    """Queue the scheduled TIs waiting for a limit that it lets go (`decide.limited`);
    their messages, and whether some still wait."""
    full_dags, full_pools = _full(capacity)
    limit = min(limit, _free(capacity))
    if limit <= 0:
        return [], False  # a result that frees a slot wakes the schedulers
    rows, limits = lock_limited(
        session, runs=runs, limit=limit, now=now, skip_dags=full_dags, skip_pools=full_pools
    )
    taken = []
    for row in rows:
        if not limits.take(row):
            continue
        if not capacity.take(row.pool, row.pool_slots, row.dag_id, row.max_active_tasks or 0):
            limits.give_back(row)
            continue
        taken.append(row)
    if rows:
        save_limits(session, limits, now)
    messages = _queue_rows(session, taken, now=now, job_id=job_id, with_trace=with_trace)
    return messages, len(messages) < len(rows)


def _queue_unlimited(
    session: Session,
    capacity: Capacity,
    job_id: int | None,
    now: dt.datetime,
    runs: ColumnElement[bool],
    limit: int,
    with_trace: bool,
) -> tuple[list[RunMessage], bool]:
    """Queue the other scheduled TIs, into the room `capacity` has left."""
    full_dags, full_pools = _full(capacity)
    limit = min(limit, _free(capacity))
    if limit <= 0:
        return [], False
    candidates = lock_scheduled_tis(session, limit, runs, full_dags, full_pools)
    if not candidates:
        return [], False
    taken = [
        row
        for row in candidates
        if capacity.take(row.pool, row.pool_slots, row.dag_id, row.max_active_tasks or 0)
    ]
    messages = _queue_rows(session, taken, now=now, job_id=job_id, with_trace=with_trace)
    return messages, len(messages) < len(candidates) or len(candidates) >= limit


def _queue_rows(
    session: Session,
    rows: Sequence[Any],
    *,
    now: dt.datetime,
    job_id: int | None,
    with_trace: bool,
) -> list[RunMessage]:
    """Queue the locked scheduled TIs `rows`, each with a fresh attempt id; their
    messages, to send after the commit."""
    assignments = [(row.id, str(uuid.uuid4())) for row in rows]
    queue_tis(session, assignments, now=now, job_id=job_id)
    return [
        new_try_message(row, attempt, dag_id=row.dag_id, run_id=row.run_id, with_trace=with_trace)
        for row, (_, attempt) in zip(rows, assignments, strict=True)
    ]


def requeue_expired(
    session: Session,
    *,
    now: dt.datetime,
    queued_timeout: float,
    runs: ColumnElement[bool],
    limit: int = 512,
) -> list[RunMessage]:
    """TIs queued longer than `queued_timeout` with no worker: publish again, same attempt_id.

    `published_at` is stamped so the next sweep waits a full timeout again; `queued_at`
    stays the try's queueing, from which a task's `queued_timeout` counts.
    """
    cutoff = now - dt.timedelta(seconds=queued_timeout)
    expired = lock_expired_queued(session, cutoff, limit, runs)
    messages = [message_for(ti) for ti in expired if ti.attempt_id]
    if expired:
        session.execute(
            update(TaskInstance)
            .where(TaskInstance.id.in_([ti.id for ti in expired]), TaskInstance.state == TI.QUEUED)
            .values(published_at=now)
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
    error = f"the worker stopped heartbeating for over {heartbeat_timeout:g}s"
    return fail_running_tries(session, dead, now, error)


def fail_running_tries(
    session: Session, tis: Sequence[TaskInstance], now: dt.datetime, error: str
) -> int:
    """The running tries `tis` (locked by the caller) whose worker is known dead go to
    up_for_retry or failed, by their tries, with `error`; how many there were."""
    if not tis:
        return 0
    specs = task_specs_of(session, tis)  # of each run's own version
    for ti in tis:
        fail_try(session, ti, specs[ti.id], now, error)
        log.warning("TI %s.%s.%s: %s", ti.dag_id, ti.run_id, ti.task_id, error)
    return len(tis)


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
