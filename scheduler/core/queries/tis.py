"""Queries over task_instance rows used for queueing and the liveness sweeps.

Lock rule: TIs are taken `FOR UPDATE OF task_instance SKIP LOCKED` in a stable
order; pool rows are locked plainly (`FOR UPDATE`, by name) by whoever queues,
so the slot accounting of two schedulers is serialised and never over-fills.
"""

from __future__ import annotations

import datetime as dt
import functools
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Row,
    Select,
    and_,
    bindparam,
    case,
    exists,
    func,
    literal,
    not_,
    or_,
    select,
)
from sqlalchemy.orm import Session

from sluice.scheduler.core.db import executed
from sluice.scheduler.core.hot_sql import built, check_registered, hot, name_of
from sluice.scheduler.core.models import Dag, DagRun, Pool, TaskInstance
from sluice.scheduler.core.named_sql import HotStatement, hot_statement, same_values
from sluice.scheduler.core.queries.sql import is_scheduled, one_of
from sluice.scheduler.core.states import TI, TI_ACTIVE, DagRunState

_POOLS = Pool.__table__.c
_TIS = TaskInstance.__table__.c
_LOCK_POOLS = hot(
    "lock every pool (SQLite)",
    select(_POOLS.name, _POOLS.slots).order_by(_POOLS.name).with_for_update(),
    twin=True,
)
_LOCK_NAMED_POOLS = hot(
    "lock named pools (SQLite)",
    _LOCK_POOLS.where(_POOLS.name.in_(bindparam("names", expanding=True))),
    twin=True,
)
_LOCK_ONE_POOL = hot(
    "lock one pool (SQLite)", _LOCK_POOLS.where(_POOLS.name == bindparam("name")), twin=True
)
LOCK_EVERY_POOL = hot_statement("lock_every_pool", same_values(_LOCK_POOLS))
LOCK_NAMED_POOLS = hot_statement("lock_named_pools", same_values(_LOCK_NAMED_POOLS))
"""scheduler/core/sql/queueing.sql; on SQLite their twins (one pool: `LOCK_POOL`)."""
_DAGS = Dag.__table__.c
_ACTIVE_USAGE = hot(
    "active usage by pool and DAG (SQLite)",
    select(
        _TIS.pool,
        _TIS.dag_id,
        func.coalesce(func.sum(_TIS.pool_slots), 0).label("slots"),
        func.count().label("tis"),
        func.max(_DAGS.max_active_tasks).label("max_active_tasks"),
    )
    .join_from(TaskInstance.__table__, Dag.__table__, _DAGS.dag_id == _TIS.dag_id, isouter=True)
    .where(one_of(_TIS.state, [state.value for state in TI_ACTIVE]))
    .group_by(_TIS.pool, _TIS.dag_id),
    twin=True,
)
ACTIVE_USAGE = hot_statement("active_usage", same_values(_ACTIVE_USAGE))
"""Run by every queueing transaction (scheduler pass or worker result): built once."""

_ACTIVE_STATES = sorted(state.value for state in TI_ACTIVE)
_OTHER = TaskInstance.__table__.alias("active")


def _room_for(
    pool: ColumnElement[Any],
    pool_slots: ColumnElement[Any],
    pool_total: ColumnElement[Any],
    dag_id: ColumnElement[Any],
    max_active: ColumnElement[Any],
) -> ColumnElement[bool]:
    """A TI of `pool_slots` fits: its pool's active TIs leave that many of `pool_total`
    free, and its DAG has fewer than `max_active` active TIs."""
    return and_(
        _used_slots(pool) + pool_slots <= pool_total,
        _active_of_dag(dag_id) < max_active,
    )


def _used_slots(pool: ColumnElement[Any]) -> ColumnElement[Any]:
    """The slots `pool`'s active TIs hold."""
    used = select(func.coalesce(func.sum(_OTHER.c.pool_slots), 0)).where(
        one_of(_OTHER.c.state, _ACTIVE_STATES), _OTHER.c.pool == pool
    )
    return used.scalar_subquery()


def room_left(
    pool: ColumnElement[Any], dag_id: ColumnElement[Any], max_active: ColumnElement[Any]
) -> tuple[ColumnElement[Any], ColumnElement[Any]]:
    """The free slots of `pool` (its slots less its active TIs') and how many more TIs DAG
    `dag_id` may have active under `max_active`: the two sides of `_room_for`, to compare
    with the running totals of several TIs at once. Counted after the pool's lock, as
    HAS_ROOM is."""
    slots = select(_POOLS.slots).where(_POOLS.name == pool).scalar_subquery()
    return slots - _used_slots(pool), max_active - _active_of_dag(dag_id)


def _active_of_dag(dag_id: ColumnElement[Any]) -> ColumnElement[Any]:
    """The DAG's active TIs, one count per state: each an equality on both columns of
    ix_task_instance_dag_state. With `state IN (…)` a prepared statement's generic plan,
    made while the table was small, used the index on dag_id alone and filtered on the
    state: every TI of the DAG read at each call (10,000 per slot fill in W5, under the
    pool's lock)."""
    counts = [
        select(func.count())
        .where(_OTHER.c.dag_id == dag_id, _OTHER.c.state == literal(state))
        .scalar_subquery()
        for state in _ACTIVE_STATES
    ]
    return functools.reduce(operator.add, counts)


HAS_ROOM = hot(
    "has room (SQLite)",
    _room_for(
        bindparam("r_pool"),
        bindparam("r_slots"),
        bindparam("r_pool_total"),
        bindparam("r_dag"),
        bindparam("r_max_active"),
    ),
    twin=True,
)
"""One TI fits: its pool has `r_slots` free of `r_pool_total` and its DAG `r_dag` is under
`r_max_active` active TIs. Evaluated in the statement that queues it, after the pool rows
were locked by an earlier statement (a statement that waits for a lock reads with its
older snapshot), so it counts every TI queued before the lock was granted."""


def lock_pools(session: Session, names: Sequence[str] | None = None) -> dict[str, int]:
    """The slots of all pools (or of `names`), rows locked FOR UPDATE in name order."""
    if names is None:
        rows = executed(session, (LOCK_EVERY_POOL, {}))
    elif len(names) == 1:
        rows = executed(session, pool_lock(names[0]))
    else:
        rows = executed(session, (LOCK_NAMED_POOLS, {"names": list(names)}))
    return {row.name: row.slots for row in rows}


def used_slots_by_pool(session: Session) -> dict[str, int]:
    stmt = (
        select(TaskInstance.pool, func.coalesce(func.sum(TaskInstance.pool_slots), 0))
        .where(TaskInstance.state.in_(list(TI_ACTIVE)))
        .group_by(TaskInstance.pool)
    )
    return {pool: int(n) for pool, n in session.execute(stmt).all()}


LOCK_POOL = hot_statement("lock_pool", lambda v: (_LOCK_ONE_POOL, {"name": v["pool"]}))
"""scheduler/core/sql/result.sql; on SQLite `lock one pool`."""


def pool_lock(name: str) -> tuple[HotStatement, dict[str, Any]]:
    """`lock_pools` of one pool as a statement and its parameters, to send with others
    (`scheduler.core.db.committed_at_once`)."""
    return LOCK_POOL, {"pool": name}


_WAITING = TaskInstance.__table__.alias("waiting")
_RUNS = DagRun.__table__.c


def _next_waiting_fits(pool_total: ColumnElement[Any]) -> ColumnElement[bool]:
    """The first TI waiting in pool `r_pool` (of a running run no job claimed; by
    priority, then age; SKIP LOCKED) if it fits: its pool (`pool_total` slots) and its
    DAG's max_active_tasks have room for it."""
    return and_(
        _TIS.id == _FIRST_WAITING,
        _room_for(
            _TIS.pool,
            _TIS.pool_slots,
            pool_total,
            _TIS.dag_id,
            select(_DAGS.max_active_tasks).where(_DAGS.dag_id == _TIS.dag_id).scalar_subquery(),
        ),
    )


_FIRST_WAITING = (
    select(_WAITING.c.id)
    .join(DagRun.__table__, _RUNS.id == _WAITING.c.dag_run_id)
    .where(
        is_scheduled(_WAITING.c.state),  # inline: the index
        _WAITING.c.pool == bindparam("r_pool"),
        _RUNS.state == DagRunState.RUNNING.value,
        _RUNS.claimed_by_job_id.is_(None),
        _WAITING.c.concurrency_key.is_(None),  # a limit's waiting TIs: the schedulers'
        _WAITING.c.rate_limit.is_(None),
    )
    .order_by(_WAITING.c.priority_weight.desc(), _WAITING.c.scheduled_at, _WAITING.c.id)
    .limit(1)
    .with_for_update(of=_WAITING, skip_locked=True)
    .scalar_subquery()
)
_FIRST_WAITING_NOTE = (
    "The first TI waiting in the pool (priority, then age; SKIP LOCKED) from the partial "
    "index ix_task_instance_waiting: its state written inline ('scheduled'), the only "
    "way a prepared statement's plan can use the index's condition."
)
NEXT_WAITING_FITS_ITS_POOL = hot(
    "next waiting TI fits its pool",
    _next_waiting_fits(
        select(_POOLS.slots).where(_POOLS.name == bindparam("r_pool")).scalar_subquery()
    ),
    _FIRST_WAITING_NOTE + " The pool's slots read in the statement (sent after its lock).",
    twin=True,
)
"""`queue_next_waiting`'s condition on SQLite: the pool's slots read in the statement
(sent right after the one that locked the pool's row, `pool_lock`)."""
FITS_ITS_POOL_FIRST = hot(
    "fits its pool first",
    and_(
        ~exists().where(is_scheduled(_WAITING.c.state), _WAITING.c.pool == _TIS.pool),
        _room_for(
            _TIS.pool,
            _TIS.pool_slots,
            select(_POOLS.slots).where(_POOLS.name == _TIS.pool).scalar_subquery(),
            _TIS.dag_id,
            bindparam("r_max_active"),
        ),
    ),
    "Nobody waits in the TI's pool (they would come first) and it has room, as HAS_ROOM.",
    twin=True,
)
"""The TI being queued may go straight to `queued`: no TI waits in its pool (they would
come first, by priority), its pool has room for its slots and its DAG is under
`r_max_active` active TIs. For a statement sent right after the one that locked the
pool's row (`pool_lock`): it counts the room with a snapshot taken after the lock."""


@dataclass(frozen=True)
class Usage:
    """Queued + running TIs: slots used per pool, TIs per DAG, and those DAGs' limits."""

    slots_by_pool: dict[str, int]
    tis_by_dag: dict[str, int]
    max_active_tasks: dict[str, int]


def active_usage(session: Session) -> Usage:
    """Queued + running TIs in one query, with the limits of their DAGs."""
    usage = Usage({}, {}, {})
    for pool, dag_id, slots, count, max_tasks in executed(session, (ACTIVE_USAGE, {})):
        usage.slots_by_pool[pool] = usage.slots_by_pool.get(pool, 0) + int(slots)
        usage.tis_by_dag[dag_id] = usage.tis_by_dag.get(dag_id, 0) + int(count)
        usage.max_active_tasks[dag_id] = int(max_tasks or 0)
    return usage


def lock_scheduled_tis(
    session: Session,
    limit: int,
    runs: ColumnElement[bool],
    skip_dags: Sequence[str] = (),
    skip_pools: Sequence[str] = (),
    *,
    limited: bool = False,
    skip_keys: Sequence[tuple[str, str]] = (),
    skip_buckets: Sequence[str] = (),
) -> list[Row[Any]]:
    """Scheduled TIs of running runs matching `runs`, by priority then age, locked SKIP LOCKED,
    with their DAG's `max_active_tasks`.

    TIs of `skip_dags` (at their max_active_tasks) and `skip_pools` (full) are left out.
    Those that wait for a limit (a rate limit, or a concurrency key known) are left out
    too; with `limited`, only they are taken, with their limits' columns, but for those
    of the keys `skip_keys` (full) and the buckets `skip_buckets` (empty): the TIs of a
    full key cannot fill the batch and starve the others.
    """
    stmt = _scheduled_statement(runs, bool(skip_dags), bool(skip_pools), limited)
    params: dict[str, Any] = {
        "limit": limit,
        "skip_dags": list(skip_dags),
        "skip_pools": list(skip_pools),
    }
    if limited:
        params["skip_keys"] = [f"{name}{KEY_SEPARATOR}{key}" for name, key in skip_keys]
        params["skip_buckets"] = list(skip_buckets)
    return list(session.execute(stmt, params))


KEY_SEPARATOR = "\x1f"
"""Between a concurrency's name and its key in one string: neither may hold a control
character (`tasks.limits`)."""


@functools.lru_cache(maxsize=16)
def _scheduled_statement(
    runs: ColumnElement[bool], skip_dags: bool, skip_pools: bool, limited: bool = False
) -> Select[Any]:
    """Built once per `runs` clause (registered: a module-level constant for the
    workers' fills, one per job for a scheduler's passes)."""
    check_registered(runs, "the scheduled TIs' statement cache")
    stmt = (
        select(
            _TIS.id,
            _TIS.dag_id,
            _TIS.run_id,
            _TIS.task_id,
            _TIS.try_number,
            _TIS.queue,
            _TIS.pool,
            _TIS.pool_slots,
            _TIS.context_carrier,
            _DAGS.max_active_tasks,
        )
        .join(DagRun, DagRun.id == TaskInstance.dag_run_id)
        .join(Dag.__table__, _DAGS.dag_id == _TIS.dag_id, isouter=True)
        .where(is_scheduled(_TIS.state), DagRun.state == DagRunState.RUNNING, runs)
        .order_by(_TIS.priority_weight.desc(), _TIS.scheduled_at, _TIS.id)
        .limit(bindparam("limit"))
        .with_for_update(of=TaskInstance.__table__, skip_locked=True)
    )
    waits_for_a_limit = or_(_TIS.concurrency_key.is_not(None), _TIS.rate_limit.is_not(None))
    if limited:
        named_key = _TIS.concurrency.concat(KEY_SEPARATOR).concat(_TIS.concurrency_key)
        stmt = stmt.where(
            waits_for_a_limit,
            or_(
                _TIS.concurrency_key.is_(None),
                named_key.not_in(bindparam("skip_keys", expanding=True)),
            ),
            or_(
                _TIS.rate_limit.is_(None),
                _TIS.rate_limit.not_in(bindparam("skip_buckets", expanding=True)),
            ),
        ).add_columns(
            _TIS.concurrency, _TIS.concurrency_key, _TIS.concurrency_limit, _TIS.rate_limit
        )
    else:
        stmt = stmt.where(not_(waits_for_a_limit))
    if skip_dags:
        stmt = stmt.where(_TIS.dag_id.not_in(bindparam("skip_dags", expanding=True)))
    if skip_pools:
        stmt = stmt.where(_TIS.pool.not_in(bindparam("skip_pools", expanding=True)))
    skips = "".join([", skip DAGs" if skip_dags else "", ", skip pools" if skip_pools else ""])
    skips += ", limited" if limited else ""
    return built(f"lock scheduled TIs of {name_of(runs)}{skips}", stmt)


def last_published(ti: Any) -> ColumnElement[Any]:
    """When a queued try's message was last published: its re-publish, if after its
    queueing, else its queueing (`ti`: the TaskInstance class)."""
    return case(
        (ti.published_at > ti.queued_at, ti.published_at),
        else_=ti.queued_at,
    )


def lock_expired_queued(
    session: Session, cutoff: dt.datetime, limit: int, runs: ColumnElement[bool]
) -> Sequence[TaskInstance]:
    """TIs of runs matching `runs` queued (or last re-published) before `cutoff` and
    never claimed, SKIP LOCKED."""
    stmt = (
        select(TaskInstance)
        .join(DagRun, DagRun.id == TaskInstance.dag_run_id)
        .where(TaskInstance.state == TI.QUEUED, last_published(TaskInstance) < cutoff, runs)
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


def lock_running_in(
    session: Session,
    hostname: str,
    pids: Sequence[int],
    runs: ColumnElement[bool],
    limit: int,
) -> Sequence[TaskInstance]:
    """Running TIs of runs matching `runs` whose worker is one of the processes `pids` on
    `hostname`, locked SKIP LOCKED; a CeleryTask try waiting on its external task (which
    outlives the worker that sent it) is not among them."""
    stmt = (
        select(TaskInstance)
        .join(DagRun, DagRun.id == TaskInstance.dag_run_id)
        .where(
            TaskInstance.state == TI.RUNNING,
            TaskInstance.hostname == hostname,
            TaskInstance.pid.in_(list(pids)),
            TaskInstance.external_id.is_(None),
            runs,
        )
        .order_by(TaskInstance.id)
        .limit(limit)
        .with_for_update(of=TaskInstance, skip_locked=True)
    )
    return session.scalars(stmt).all()
