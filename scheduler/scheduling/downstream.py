"""The worker's "mini scheduler": decide and queue a finished TI's direct downstream.

Called in the worker's result transaction (`lock_run` before the result's
compare-and-set, `schedule_downstream` after it won), so a hop (end of task i → start
of task i+1) needs no scheduler round trip: the worker
decides the downstream tasks of what it just finished, queues the ready ones that fit
their pool and DAG limits, and publishes after its commit (Airflow's
`schedule_after_task_execution`, carried on to queueing). A success with no log to
store of a fan-in's upstream or of a chain's link is committed in one query (a link's
next task queued in it, `chain_next_statements`; a fan-in by one query after its last
upstream, `join_next_statements`), any further decision following in a transaction of
its own under the same lock (`broker.worker.one_query_result`).

Invariants:
- Decisions about a run are made only under its row lock, taken `FOR NO KEY UPDATE`
  (`scheduler.core.queries.runs` says why not `FOR UPDATE`) as the first statement of the
  result transaction, before the result is written: every decision about the run
  sees every result committed before it, and the last result of a fan-in always
  sees the others. Waiting for the lock holds no other lock (lock
  order everywhere: run, then its TIs, then pools), so it cannot deadlock; the
  holder is another worker's result transaction or a scheduler pass, both short
  (runs too big for a worker to read, READ_LIMIT, are never locked here).
- Queueing takes the pool rows `FOR UPDATE` as the scheduler does, so slot and
  max_active_tasks accounting stays exact with any number of workers and schedulers.
  The pool rows are the last lock taken and their holder waits on no other lock, so
  this cannot deadlock.
- Priority order holds as in a scheduler pass: a ready TI goes straight to `queued`
  only if its pool has room and no other TI of that pool waits in `scheduled`;
  otherwise it joins the waiting ones and the free slots (this result's among them)
  are filled by `queueing.queue_scheduled`, by priority then age, as a scheduler does;
  a result with nothing ready gives the slot it freed to the first TI waiting in its
  pool (`fill_freed_slot`).
- Only runs no job has claimed (the scheduler's runs) are driven here: a backfill
  drives its own runs, a run whose DAG changed needs `verify_integrity`, and a
  cascade (a downstream skipped or upstream_failed) or a run whose TIs are all
  finished needs the scheduler's full decision; each of these sets `wake`.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Label,
    Row,
    Select,
    Update,
    and_,
    bindparam,
    case,
    exists,
    select,
)
from sqlalchemy.orm import Session

from sluice.scheduler.core.db import Sent
from sluice.scheduler.core.messages import RunMessage
from sluice.scheduler.core.models import Dag, DagRun, Pool, TaskInstance
from sluice.scheduler.core.queries.sql import expected_state, one_of
from sluice.scheduler.core.queries.tis import (
    FITS_ITS_POOL_FIRST,
    HAS_ROOM,
    NEXT_WAITING_FITS,
    NEXT_WAITING_FITS_ITS_POOL,
    lock_pools,
    pool_lock,
)
from sluice.scheduler.core.states import (
    TI,
    TI_UNFINISHED,
    DagRunState,
    SpanStatus,
    TaskInstanceState,
)
from sluice.scheduler.core.transitions import (
    move_ti_reading,
    move_tis,
    queue_picked_statement,
    queue_ti_if,
    queue_tis,
    queue_waiting_if,
    ti_move_returning,
)
from sluice.scheduler.scheduling import spans
from sluice.scheduler.scheduling.deps import TiView, decide_one, upstream_counts
from sluice.scheduler.scheduling.queueing import Capacity, new_try_message, queue_scheduled
from sluice.tasks.trigger_rules import TriggerRule, Verdict, decide

READ_LIMIT = 256
"""Most TIs a worker reads to decide a downstream. Beyond it (the 10,000-way fan-in of a
big DAG's join, read again on each of its upstreams' results) the schedulers decide:
their passes coalesce the wake-ups of many results into one read of the run."""

FILL_LIMIT = 16
"""Most waiting TIs one worker result queues by priority (more: a scheduler pass)."""

FEW = 16
"""Up to this many TIs to read, they are named; beyond it (in a DAG of at most
READ_LIMIT tasks) the whole run is read."""

_TI = TaskInstance.__table__.c
_RUN = DagRun.__table__.c

# Statements of every result, built once (building one costs as much as running it).
_WAITING = exists().where(
    _TI.state == TI.SCHEDULED.value, _TI.pool.in_(bindparam("pools", expanding=True))
)
_UNCLAIMED = _RUN.claimed_by_job_id.is_(None)
"""The runs workers drive (no job claimed them): one constant, so statements cache."""
_LOCK_RUN = (
    select(_RUN.run_id, _RUN.claimed_by_job_id, _RUN.dag_hash, _RUN.span_status)
    .where(
        _RUN.id == bindparam("run_pk"),
        expected_state(_RUN.state, [DagRunState.RUNNING.value]),  # by its key
    )
    .with_for_update(key_share=True)
)
"""Its own statement: a statement that waits for a row lock keeps the snapshot it
started with for its other rows, so TIs read in it could miss the holder's result."""


def run_lock(run_pk: int) -> tuple[Select[Any], dict[str, Any]]:
    """`_LOCK_RUN` of `run_pk` and its parameters: the first statement of a result
    transaction, sent with its BEGIN (`scheduler.core.db.transaction_opened_by`)."""
    return _LOCK_RUN, {"run_pk": run_pk}


_IS_DOWNSTREAM = _TI.task_id.in_(bindparam("downstream", expanding=True))
_READ_RUN = select(
    _TI.id,
    _TI.task_id,
    _TI.state,
    # an upstream's result matters only if it is a branch task's choice; a big
    # fan-in reads its upstreams on every result, so other values are not sent
    case((_TI.task_id.in_(bindparam("branches", expanding=True)), _TI.result)).label("result"),
    _TI.try_number,
    _TI.queue,
    _TI.pool,
    _TI.pool_slots,
    _TI.priority_weight,
    case((_IS_DOWNSTREAM, _TI.context_carrier)).label("context_carrier"),
    _WAITING.label("backlog"),
).where(_TI.dag_run_id == bindparam("run_pk"))
"""Every TI of the run: for a small DAG with a fan-in, cheaper than naming the TIs (a
long IN list is re-planned on each execution and costs more than the extra rows)."""
_READ = _READ_RUN.where(_TI.task_id.in_(bindparam("task_ids", expanding=True)))
"""Only the TIs the decision needs (a few, from a run of any size)."""
_POOL = Pool.__table__.c


def _locked_pool_total(*only_if: ColumnElement[bool]) -> Label[Any]:
    """The slots of pool `lock_pool` as `pool_total`, its row locked FOR UPDATE (when
    `only_if` holds; else NULL, nothing locked): a column for a statement already sent."""
    return (
        select(_POOL.slots)
        .where(_POOL.name == bindparam("lock_pool"), *only_if)
        .with_for_update(of=Pool.__table__)
        .scalar_subquery()
        .label("pool_total")
    )


_POOL_TOTAL = _locked_pool_total()
_READ_RUN_LOCKING, _READ_LOCKING = (
    _READ_RUN.add_columns(_POOL_TOTAL),
    _READ.add_columns(_POOL_TOTAL),
)
"""The reads that also lock the one pool row the ready downstream will be queued into
(its slots as `pool_total`), for a result whose success makes its downstream ready: one
round trip fewer than locking the pool in a statement of its own. Waiting for that lock
inside the read is safe: the TIs it reads are the locked run's, which no one else can
change meanwhile; the statement that then counts the pool's room starts after the lock
was granted (see `HAS_ROOM`)."""

_OTHER = TaskInstance.__table__.alias("other")
_OF_RUN_UNFINISHED = (
    _OTHER.c.dag_run_id == bindparam("run_pk"),
    one_of(_OTHER.c.state, [state.value for state in TI_UNFINISHED]),
)


_POOL_TOTAL_IF_WAITING = _locked_pool_total(
    exists().where(_TI.state == TI.SCHEDULED.value, _TI.pool == bindparam("lock_pool"))
)
"""The slots of the finished TI's pool, its row locked, if TIs wait in it (the slot this
result frees goes to one of them, `fill_freed_slot`); else NULL and nothing locked."""


def _fan_in_columns(names: ColumnElement[bool]) -> tuple[ColumnElement[Any], ...]:
    unfinished = exists().where(*_OF_RUN_UNFINISHED, names)  # the first found is enough
    return unfinished.label("unfinished"), _WAITING.label("backlog"), _POOL_TOTAL_IF_WAITING


_FAN_IN_OTHERS = _fan_in_columns(_OTHER.c.task_id.in_(bindparam("fan_in", expanding=True)))
_FAN_IN_ALL_BUT = _fan_in_columns(_OTHER.c.task_id.not_in(bindparam("fan_in", expanding=True)))
"""Returned by the result's own UPDATE: whether any of a fan-in's other upstreams is
unfinished (named, or as all the run's TIs but the fewer others), whether TIs wait in
the pools, and the freed pool's slots with its row locked if TIs wait in it. One round
trip under the run's lock, whatever the fan-in's width (waiting there for the pool's
lock is safe, as for `_READ_LOCKING`)."""

WAITS_FOR_ALL = frozenset(
    {
        TriggerRule.ALL_SUCCESS,
        TriggerRule.ALL_DONE,
        TriggerRule.NONE_FAILED,
        TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS,
        TriggerRule.NONE_SKIPPED,
        TriggerRule.ONE_FAILED,
    }
)
"""Rules under which one more successful upstream changes nothing while another is
unfinished: any earlier verdict comes from the other upstreams' states (whose results
decided it, or woke a scheduler to)."""

_UNFINISHED = (
    select(_TI.id)
    .where(
        _TI.dag_run_id == bindparam("run_pk"),
        one_of(_TI.state, [state.value for state in TI_UNFINISHED]),
    )
    .limit(1)
)


@dataclass
class FollowUp:
    """What the result transaction did for the run: messages to send after the commit,
    and whether the schedulers must still look at the run (`wake`)."""

    messages: list[RunMessage] = field(default_factory=list)
    wake: bool = False


@dataclass(frozen=True)
class Plan:
    """What deciding a task's downstream needs, from the DAG alone (cached per DAG
    version, task and pool)."""

    downstream: tuple[str, ...]
    needed: frozenset[str]
    """The task, its direct downstream and their upstreams."""
    params: dict[str, Any]
    """The reads' parameters, but `run_pk`."""
    whole_run: bool
    locks_pool: bool
    """A success makes every downstream ready (this task is their only upstream) and they
    share this task's pool: the result's read locks that pool's row (`_READ_LOCKING`)."""
    fan_in: tuple[tuple[ColumnElement[Any], ...], list[str]] | None
    """For a success into one fan-in that waits for all its upstreams: the columns the
    result's UPDATE returns and the task ids they name (`_FAN_IN_*`)."""
    chain_next: str | None = None
    """For a success whose one downstream has this task as its only upstream, in the same
    pool, and runs after it (its trigger rule's verdict on one success), this task not a
    branch: that downstream, which is ready once the result is written (`chain_next_statements`)."""
    join_next: str | None = None
    """For a success into one all_success fan-in in this task's pool, no upstream a
    branch: that fan-in, which the last upstream queues by one query after its result
    when every upstream succeeded and it fits (`join_next_statements`)."""
    wide: bool = False
    """More than READ_LIMIT TIs to read, but a success into a fan-in (`fan_in`): its result's
    write says whether other upstreams are unfinished, without reading them
    (`wide_fan_in`); after the last one, the fan-in is queued by `join_next_statements`
    when it may be, else decided by the schedulers (they read the run)."""


@dataclass(frozen=True)
class LockedRun:
    """A run locked by `lock_run` in the result transaction; after `write_result`, the
    TIs the decision needs (`plan.needed`) as read then."""

    run_pk: int
    run_id: str
    dag: Dag
    task_id: str
    pool: str
    """The finished TI's pool: the slot its result frees."""
    plan: Plan
    rows: list[Row[Any]] = field(default_factory=list)
    backlog: bool = False
    """TIs wait in `scheduled` in the pools concerned (read before the pool lock: one that
    starts waiting meanwhile is treated as arriving after this decision)."""
    waiting: bool = False
    """The one downstream waits for other upstreams still unfinished (`rows` is empty):
    nothing to decide, and the run is not over."""
    pool_total: int | None = None
    """The slots of the finished TI's pool when this transaction locked its row already
    (`Plan.locks_pool`, `_POOL_TOTAL_IF_WAITING`), else None."""


_PLANS: dict[tuple[str, str, str, bool], Plan | None] = {}
_PLANS_SIZE = 4096


def _plan(dag: Dag, task_id: str, pool: str, success: bool) -> Plan | None:
    """The cached `Plan`; None for more than READ_LIMIT TIs to read."""
    key = (dag.version_hash, task_id, pool, success)
    if key not in _PLANS:
        if len(_PLANS) >= _PLANS_SIZE:
            _PLANS.clear()
        _PLANS[key] = _make_plan(dag.version_hash, dag.serialized["tasks"], task_id, pool, success)
    return _PLANS[key]


@dataclass(frozen=True)
class _Join:
    """What every upstream's plan needs of one downstream, worked out once per DAG version
    (a fan-in of 10,000 upstreams has 10,000 plans)."""

    upstream: frozenset[str]
    not_upstream: tuple[str, ...]
    """The DAG's other tasks, sorted (the fan-in itself among them)."""
    branch_upstream: bool


_JOINS: dict[tuple[str, str], _Join] = {}


def _join(version: str, tasks: Mapping[str, Any], down: str) -> _Join:
    key = (version, down)
    found = _JOINS.get(key)
    if found is None:
        if len(_JOINS) >= _PLANS_SIZE:
            _JOINS.clear()
        up = frozenset(tasks[down]["upstream"])
        branchy = any(tasks[u].get("is_branch") for u in up)
        found = _JOINS[key] = _Join(up, tuple(sorted(set(tasks) - up)), branchy)
    return found


def _make_plan(
    version: str, tasks: Mapping[str, Any], task_id: str, pool: str, success: bool
) -> Plan | None:
    downstream = tuple(tasks.get(task_id, {}).get("downstream", []))
    join = _join(version, tasks, downstream[0]) if len(downstream) == 1 else None
    if join is not None:
        size = (
            len(join.upstream)
            + (task_id not in join.upstream)
            + (downstream[0] not in join.upstream)
        )
        needed: set[str] = set()
    else:
        needed = {task_id, *downstream}
        for down in downstream:
            needed.update(tasks[down]["upstream"])
        size = len(needed)
    pools = sorted({pool} | {tasks[d].get("pool") or pool for d in downstream})
    fan_in = _fan_in(tasks, task_id, downstream[0], join) if success and join else None
    join_next = _join_next(tasks, task_id, downstream, pools, join) if fan_in and join else None
    if size > READ_LIMIT:  # a wide fan-out or fan-in: one scheduler pass decides
        if fan_in is None:
            return None
        params = {"pools": pools}
        return Plan(downstream, frozenset(), params, False, False, fan_in, None, join_next, True)
    if join is not None:
        needed = {task_id, *downstream, *join.upstream}
    branches = sorted(t for t in needed if tasks[t].get("is_branch"))
    params = {
        "task_ids": sorted(needed),
        "downstream": sorted(downstream) or [task_id],
        "branches": branches or [""],
        "pools": pools,
    }
    whole_run = len(needed) > FEW and len(tasks) <= READ_LIMIT
    locks_pool = (
        success
        and len(pools) == 1
        and bool(downstream)
        and all(tasks[d]["upstream"] == [task_id] for d in downstream)
    )
    chain_next = None
    if locks_pool and len(downstream) == 1 and not tasks[task_id].get("is_branch"):
        rule = TriggerRule(tasks[downstream[0]]["trigger_rule"])
        if decide(rule, upstream_counts([TI.SUCCESS])) is Verdict.RUN:
            chain_next = downstream[0]
    return Plan(
        downstream, frozenset(needed), params, whole_run, locks_pool, fan_in, chain_next, join_next
    )


def _join_next(
    tasks: Mapping[str, Any],
    task_id: str,
    downstream: tuple[str, ...],
    pools: list[str],
    join: _Join,
) -> str | None:
    """`Plan.join_next`: the one downstream, if its rule is all_success, it shares the
    task's pool and none of its upstreams is a branch (whose choice could skip it)."""
    if len(pools) != 1 or join.branch_upstream or tasks[task_id].get("is_branch"):
        return None
    if TriggerRule(tasks[downstream[0]]["trigger_rule"]) is not TriggerRule.ALL_SUCCESS:
        return None
    return downstream[0]


def _fan_in(
    tasks: Mapping[str, Any], task_id: str, down: str, join: _Join
) -> tuple[tuple[ColumnElement[Any], ...], list[str]] | None:
    """If `task_id`'s success cannot decide `down` while another upstream of it is
    unfinished: how the result's UPDATE counts those (`_FAN_IN_*`, the names)."""
    others = len(join.upstream) - (task_id in join.upstream)
    if not others or TriggerRule(tasks[down]["trigger_rule"]) not in WAITS_FOR_ALL:
        return None
    if others <= len(tasks) - others:
        return _FAN_IN_OTHERS, sorted(join.upstream - {task_id})
    # a wide fan-in: name the few that are not (the task among them)
    return _FAN_IN_ALL_BUT, sorted({*join.not_upstream, task_id})


def decidable(dag: Dag | None, task_id: str, pool: str, finished: TaskInstanceState) -> Plan | None:
    """The plan of deciding `task_id`'s downstream after `finished` from `dag` (the
    DAG row the worker ran it from); None if a worker does not decide it (no DAG row,
    more than READ_LIMIT TIs to read): `lock_run` then locks nothing."""
    if dag is None or not dag.serialized:
        return None
    plan = _plan(dag, task_id, pool, finished is TI.SUCCESS)
    return None if plan is None or plan.wide else plan


def wide_fan_in(
    dag: Dag | None, task_id: str, pool: str, finished: TaskInstanceState
) -> Plan | None:
    """For a success into a fan-in too wide for `decidable`: the plan of its result's
    write that says whether other upstreams are unfinished (`Plan.wide`); else None."""
    if dag is None or not dag.serialized or finished is not TI.SUCCESS:
        return None
    plan = _plan(dag, task_id, pool, True)
    return plan if plan is not None and plan.wide else None


def lock_run(
    session: Session,
    *,
    run_pk: int,
    task_id: str,
    pool: str,
    dag: Dag | None,
    finished: TaskInstanceState = TI.SUCCESS,
    opened: list[Any] | None = None,
) -> LockedRun | None:
    """Lock run `run_pk` (FOR NO KEY UPDATE) to decide `task_id`'s downstream after its
    `finished` result; None if this worker may not decide the run (claimed by a job,
    not running, of another DAG version, its spans waiting for a scheduler to continue
    them, or more than READ_LIMIT TIs to read). `opened`: the rows of `run_lock`,
    when the transaction was opened with it (the lock is then held already).

    Called in the result transaction BEFORE the result is written (`write_result`), so
    the lock is held when the result becomes visible to others: every decision sees
    every result. `dag` is the (cached, read-only) DAG row the worker ran the task from;
    `pool` is the finished TI's pool, whose freed slot waiting TIs may want.
    """
    plan = decidable(dag, task_id, pool, finished)
    if dag is None or plan is None:
        return None
    if opened is None:
        run = session.execute(_LOCK_RUN, {"run_pk": run_pk}).first()
    else:
        run = opened[0] if opened else None
    if run is None or not drives(run, dag):
        return None
    return LockedRun(run_pk, run.run_id, dag, task_id, pool, plan)


def drives(run: Any, dag: Dag) -> bool:
    """Whether a worker decides run `run` (a row of `run_lock`, the run running) from
    `dag`: no job claimed it, it is of that DAG version, and its spans need no
    scheduler to continue them (TIs must nest under the continuing span)."""
    return (
        run.claimed_by_job_id is None
        and run.dag_hash == dag.version_hash
        and run.span_status != SpanStatus.NEEDS_CONTINUANCE
    )


def write_result(
    session: Session,
    locked: LockedRun,
    *,
    ti_id: int,
    new: TaskInstanceState,
    attempt_id: str,
    now: dt.datetime,
    values: Mapping[str, Any],
    sent: list[Row[Any]] | None = None,
) -> LockedRun | None:
    """The result's compare-and-set running → `new` under the run's lock, then what
    deciding its downstream needs; None if the result lost (nothing is read).

    A success into a fan-in that waits for all its upstreams has its UPDATE count the
    others still unfinished (`fan_in_write`): while one is, the run's TIs are not read
    (`waiting`). `sent`: that UPDATE's rows when it was sent with the run's lock."""
    plan = locked.plan
    move: dict[str, Any] = {
        "expect": [TI.RUNNING],
        "attempt_id": attempt_id,
        "now": now,
        "values": values,
    }
    if plan.fan_in is not None:
        if sent is None:
            fan_in = fan_in_write(
                plan, run_pk=locked.run_pk, pool=locked.pool, ti_id=ti_id, new=new, **move
            )
            assert fan_in is not None
            sent = list(session.execute(*fan_in).all())
        if not sent:
            return None
        row = sent[0]
        locked = replace(locked, pool_total=row.pool_total)
        if row.unfinished:
            return replace(locked, backlog=bool(row.backlog), waiting=True)
        return read_run(session, locked)  # the last result: the others finished
    read, params = _read_statement(locked.run_pk, plan)
    moved = move_ti_reading(session, ti_id, new, read=read, params=params, **move)
    if moved is None:
        return None
    return _with_rows(locked, [row for row in moved if row.task_id in plan.needed])


def read_run(session: Session, locked: LockedRun) -> LockedRun:
    """`locked` with the TIs its decision needs, read now (under the run's lock, the
    result written: in this transaction or committed before it)."""
    read, params = _read_statement(locked.run_pk, locked.plan)
    return _with_rows(
        locked, [row for row in session.execute(read, params) if row.task_id in locked.plan.needed]
    )


def _with_rows(locked: LockedRun, rows: list[Row[Any]]) -> LockedRun:
    if locked.plan.locks_pool:
        locked = replace(locked, pool_total=rows[0].pool_total)
    return replace(locked, rows=rows, backlog=bool(rows[0].backlog))


def fan_in_write(
    plan: Plan | None,
    *,
    run_pk: int,
    pool: str,
    ti_id: int,
    new: TaskInstanceState,
    expect: list[TaskInstanceState],
    attempt_id: str,
    now: dt.datetime,
    values: Mapping[str, Any],
) -> tuple[Update, dict[str, Any]] | None:
    """The result's UPDATE that also counts a fan-in's other upstreams still unfinished
    (`Plan.fan_in`) and its parameters; None when `plan` has no fan-in to count. To run
    under the run's lock: sent with it (`run_lock`) or after `lock_run`."""
    if plan is None or plan.fan_in is None:
        return None
    columns, names = plan.fan_in
    check = {"run_pk": run_pk, "pools": plan.params["pools"], "fan_in": names, "lock_pool": pool}
    return ti_move_returning(
        ti_id,
        new,
        expect=expect,
        now=now,
        returning=columns,
        attempt_id=attempt_id,
        values=values,
        params=check,
    )


_ME = TaskInstance.__table__.alias("finished")
_CHAIN_NEXT = and_(
    _TI.dag_run_id == bindparam("run_pk"),
    _TI.task_id == bindparam("next_task"),
    exists().where(
        _RUN.id == bindparam("run_pk"),
        expected_state(_RUN.state, [DagRunState.RUNNING.value]),
        _UNCLAIMED,
        _RUN.dag_hash == bindparam("dag_hash"),
        _RUN.span_status != SpanStatus.NEEDS_CONTINUANCE.value,
    ),
    exists().where(
        _ME.c.id == bindparam("finished_id"), expected_state(_ME.c.state, [TI.SUCCESS.value])
    ),
    FITS_ITS_POOL_FIRST,
)
"""A chain's next TI, to queue in the query that writes its only upstream's success: of a
run a worker drives (as `drives` checks), that upstream succeeded (the write before it
won, or an earlier one did), nobody waits in its pool, which has room (`FITS_ITS_POOL_FIRST`)."""


_UP = TaskInstance.__table__.alias("up")
_JOIN_NEXT = {
    among: and_(
        _CHAIN_NEXT,
        ~exists().where(
            _UP.c.dag_run_id == bindparam("run_pk"),
            _UP.c.task_id.in_(bindparam("fan_in", expanding=True))
            if among
            else _UP.c.task_id.not_in(bindparam("fan_in", expanding=True)),
            _UP.c.state != TI.SUCCESS.value,
        ),
    )
    for among in (True, False)
}
"""A fan-in to queue after its last upstream's result (`_CHAIN_NEXT`: the run a worker
drives, that upstream succeeded, room in the pool, nobody waiting), when no other
upstream (named, or all the run's TIs but the fewer others: `Plan.fan_in`) is anything
but a success. Only the upstream whose write, under the run's lock, saw no other
unfinished sends it, again under the run's lock; the queueing is a compare-and-set."""


def join_next_statements(
    plan: Plan, dag: Dag, *, run_pk: int, finished_id: int, attempt_id: str, now: dt.datetime
) -> list[Sent]:
    """After the run's lock, once the last upstream (a task with `plan.join_next`) wrote its
    success: the fan-in's pool's row locked, then the fan-in queued as `attempt_id` if
    every upstream succeeded and it may be (`_JOIN_NEXT`); not queued, it is decided as a
    plain result's downstream is."""
    assert plan.join_next is not None and plan.fan_in is not None
    columns, names = plan.fan_in
    condition = _JOIN_NEXT[columns is _FAN_IN_OTHERS]
    found = (run_pk, finished_id, attempt_id, now)
    return _next_statements(plan, dag, plan.join_next, condition, *found, fan_in=names)


def chain_next_statements(
    plan: Plan, dag: Dag, *, run_pk: int, finished_id: int, attempt_id: str, now: dt.datetime
) -> list[Sent]:
    """After the statement that writes a success of a task with `plan.chain_next`: its
    pool's row locked, then that next TI queued as `attempt_id` if it may be (`_CHAIN_NEXT`;
    its row, `_PICKED`, makes the message: `fill_message`). Not queued (no room, TIs
    waiting, its DAG at max_active_tasks), the decision is a transaction's
    (`read_run`, `schedule_downstream`)."""
    assert plan.chain_next is not None
    found = (run_pk, finished_id, attempt_id, now)
    return _next_statements(plan, dag, plan.chain_next, _CHAIN_NEXT, *found)


def _next_statements(
    plan: Plan,
    dag: Dag,
    next_task: str,
    condition: ColumnElement[bool],
    run_pk: int,
    finished_id: int,
    attempt_id: str,
    now: dt.datetime,
    **more: Any,
) -> list[Sent]:
    """The pool lock, then the queueing of `next_task` where `condition` holds."""
    params = {
        "run_pk": run_pk,
        "next_task": next_task,
        "dag_hash": dag.version_hash,
        "finished_id": finished_id,
        "r_max_active": dag.max_active_tasks,
        **more,
    }
    queue = queue_picked_statement(
        attempt_id, now=now, condition=condition, params=params, returning=_PICKED, decided=True
    )
    return [pool_lock(plan.params["pools"][0]), queue]


def _read_statement(run_pk: int, plan: Plan) -> tuple[Select[Any], dict[str, Any]]:
    params = {**plan.params, "run_pk": run_pk}
    if plan.locks_pool:
        params["lock_pool"] = plan.params["pools"][0]
    if plan.whole_run:
        del params["task_ids"]
        return (_READ_RUN_LOCKING if plan.locks_pool else _READ_RUN), params
    return (_READ_LOCKING if plan.locks_pool else _READ), params


def schedule_downstream(
    session: Session,
    locked: LockedRun,
    *,
    finished: TaskInstanceState,
    result: str | None,
    now: dt.datetime,
    with_trace: bool = False,
) -> FollowUp:
    """After the result of `locked.task_id` (`finished`, its stored `result`) was written
    in this transaction: decide its direct downstream and queue what is ready."""
    dag = locked.dag
    tasks = dag.serialized["tasks"]
    downstream = list(locked.plan.downstream)
    follow = FollowUp()
    ready = (
        []
        if locked.waiting
        else _decide(session, locked, tasks, downstream, finished, result, now, follow)
    )
    if ready and not locked.backlog:
        follow.messages = _queue(session, locked, ready, now, follow, with_trace)
    elif ready:
        # they join the TIs waiting in their pools: queue by the schedulers' order
        # (priority, then age) into the slots free now, this result's among them
        move_tis(session, [r.id for r in ready], TI.SCHEDULED, expect=[TI.NONE], now=now)
        follow.messages, left = queue_scheduled(
            session,
            job_id=None,
            now=now,
            runs=_UNCLAIMED,
            limit=FILL_LIMIT,
            with_trace=with_trace,
        )
        follow.wake |= left and len(follow.messages) >= FILL_LIMIT  # more may fit: a pass
    elif locked.backlog:  # the slot this result freed goes to the first in line
        follow.messages = fill_freed_slot(
            session, pool=locked.pool, now=now, with_trace=with_trace, total=locked.pool_total
        )
    if with_trace and follow.messages:
        spans.start_ti_spans(session, [m.ti_id for m in follow.messages], now)
    if not ready and not locked.waiting and not _has_unfinished(session, locked):
        follow.wake = True  # every TI finished: the scheduler ends the run
    return follow


_PICKED = (
    _TI.id,
    _TI.dag_id,
    _TI.run_id,
    _TI.task_id,
    (_TI.try_number - 1).label("try_number"),  # as before the queueing bumped it
    _TI.queue,
    _TI.context_carrier,
)


def fill_freed_slot(
    session: Session,
    *,
    pool: str,
    now: dt.datetime,
    with_trace: bool = False,
    total: int | None = None,
) -> list[RunMessage]:
    """Queue the first TI waiting in `pool` (priority, then age: the schedulers' order)
    into the slot the result freed, if it fits; its message.

    The pool's row FOR UPDATE (unless locked already: `total` is then its slots), then
    one statement that picks the TI (SKIP LOCKED), checks its room and queues it. A TI
    that does not fit (its DAG at max_active_tasks) is left to the schedulers' passes."""
    if total is None:
        total = lock_pools(session, [pool]).get(pool)
    if total is None:
        return []
    attempt_id = str(uuid.uuid4())
    row = queue_waiting_if(
        session,
        attempt_id,
        now=now,
        condition=NEXT_WAITING_FITS,
        params={"r_pool": pool, "r_pool_total": total},
        returning=_PICKED,
    )
    if row is None:
        return []
    return [fill_message(row, attempt_id, with_trace)]


def fill_statements(pool: str, attempt_id: str, now: dt.datetime) -> list[Sent]:
    """`fill_freed_slot` of `pool` as statements to send in one query: the pool's row
    locked, then the first waiting TI queued as `attempt_id` if it fits (a statement of
    its own, so it counts the room after the lock was granted). Its row (`_PICKED`)
    makes the message (`fill_message`)."""
    return [
        pool_lock(pool),
        queue_picked_statement(
            attempt_id,
            now=now,
            condition=NEXT_WAITING_FITS_ITS_POOL,
            params={"r_pool": pool},
            returning=_PICKED,
        ),
    ]


def fill_message(row: Row[Any], attempt_id: str, with_trace: bool = False) -> RunMessage:
    """The message of the TI a fill queued (`fill_statements`, `fill_freed_slot`)."""
    return new_try_message(
        row, attempt_id, dag_id=row.dag_id, run_id=row.run_id, with_trace=with_trace
    )


def _decide(
    session: Session,
    locked: LockedRun,
    tasks: Mapping[str, Any],
    downstream: list[str],
    finished: TaskInstanceState,
    result: str | None,
    now: dt.datetime,
    follow: FollowUp,
) -> list[Row[Any]]:
    """Decide the `none` TIs among `downstream`: the rows of the ready ones (still in
    `none`); skipped / upstream_failed ones are written and left to the scheduler."""
    rows = locked.rows
    by_task = {
        r.task_id: TiView(id=r.id, task_id=r.task_id, state=TI(r.state), result=r.result)
        for r in rows
    }
    mine = by_task[locked.task_id]
    by_task[locked.task_id] = TiView(
        id=mine.id, task_id=mine.task_id, state=finished, result=result
    )
    state: dict[str, TaskInstanceState] = {t: ti.state for t, ti in by_task.items()}
    row_of = {r.task_id: r for r in rows}
    ready: list[Row[Any]] = []
    for down in downstream:
        ti = by_task.get(down)
        if ti is None or ti.state is not TI.NONE:
            continue
        new = decide_one(tasks[down], tasks, by_task, state)
        if new is TI.SCHEDULED:
            ready.append(row_of[down])
        elif new is not None and move_tis(session, [ti.id], new, expect=[TI.NONE], now=now):
            follow.wake = True  # a skip / upstream_failed cascade: the scheduler decides on
    return ready


def _queue(
    session: Session,
    locked: LockedRun,
    ready: list[Row[Any]],
    now: dt.datetime,
    follow: FollowUp,
    with_trace: bool,
) -> list[RunMessage]:
    """Queue the ready TIs that fit (pool rows locked FOR UPDATE); the rest go to
    `scheduled` for the schedulers, which are then woken. One TI (a chain's next) is
    queued by one statement that checks its room itself (`HAS_ROOM`), its pool's row
    locked by the result's read (`Plan.locks_pool`) or by a statement of its own."""
    dag, run_id = locked.dag, locked.run_id
    queued: list[tuple[Row[Any], str]] = []
    later: list[int] = []
    if len(ready) == 1:
        row, attempt_id = ready[0], str(uuid.uuid4())
        total = locked.pool_total
        if total is None or row.pool != locked.pool:
            total = lock_pools(session, [row.pool]).get(row.pool, 0)
        room = {
            "r_pool": row.pool,
            "r_slots": row.pool_slots,
            "r_pool_total": total,
            "r_dag": dag.dag_id,
            "r_max_active": dag.max_active_tasks,
        }
        if queue_ti_if(session, row.id, attempt_id, now=now, condition=HAS_ROOM, params=room):
            queued.append((row, attempt_id))
        else:
            later.append(row.id)
    else:
        capacity = Capacity.locked(session)
        for row in sorted(ready, key=lambda r: (-r.priority_weight, r.id)):
            if capacity.take(row.pool, row.pool_slots, dag.dag_id, dag.max_active_tasks):
                queued.append((row, str(uuid.uuid4())))
            else:
                later.append(row.id)
        queue_tis(session, [(r.id, a) for r, a in queued], now=now, job_id=None, decided=True)
    if later:
        move_tis(session, later, TI.SCHEDULED, expect=[TI.NONE], now=now)
        follow.wake = True
    return [
        new_try_message(row, a, dag_id=dag.dag_id, run_id=run_id, with_trace=with_trace)
        for row, a in queued
    ]


def _has_unfinished(session: Session, locked: LockedRun) -> bool:
    """Whether the run has a TI left to finish: known from the rows read when one of
    them is (a downstream waiting on other upstreams), else one indexed query."""
    others = (r for r in locked.rows if r.task_id != locked.task_id)
    if any(TI(r.state) in TI_UNFINISHED for r in others):
        return True
    return session.execute(_UNFINISHED, {"run_pk": locked.run_pk}).first() is not None
