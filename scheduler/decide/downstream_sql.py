"""The statements a worker's result sends to decide and queue its downstream.

The ones its one-query paths send are named statements of scheduler/core/sql/result.sql
(`HotStatement`s: `run_lock`, `write_success*`, `queue_*`, `schedule_*`), made here with
their values; each has a SQLite twin built below from SQLAlchemy Core parts, once, at
import (building a statement costs as much as running it). The reads and the parts a
decision in a session uses (`read_statement`, `UNFINISHED`, `UNCLAIMED`, `PICKED`) are
SQLAlchemy statements run in that session. Which of them a result sends, and in what
order, is its path's (`sluice.broker.worker.result`).

Lock order, as everywhere: the run's row (`run_lock`), then its TIs, then pool rows.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any, Protocol

from sqlalchemy import (
    ColumnElement,
    Executable,
    Label,
    and_,
    bindparam,
    case,
    exists,
    func,
    select,
)

from sluice.scheduler.core.db import Sent
from sluice.scheduler.core.hot_sql import hot
from sluice.scheduler.core.messages import RunMessage
from sluice.scheduler.core.models import Dag, DagRun, Pool, TaskInstance
from sluice.scheduler.core.named_sql import HotStatement, Twin, hot_statement, same_values
from sluice.scheduler.core.queries.sql import expected_state, is_scheduled, one_of
from sluice.scheduler.core.queries.tis import (
    FITS_ITS_POOL_FIRST,
    HAS_ROOM,
    NEXT_WAITING_FITS_ITS_POOL,
    pool_lock,
    room_left,
)
from sluice.scheduler.core.states import (
    TI,
    TI_UNFINISHED,
    DagRunState,
    SpanStatus,
    TaskInstanceState,
)
from sluice.scheduler.core.transitions import (
    queue_picked_statement,
    queue_ranked_statement,
    queue_ti_if_statement,
    schedule_where_statement,
    ti_move_returning,
)
from sluice.scheduler.decide.plans import Counted, Plan
from sluice.scheduler.decide.queueing import new_try_message

_TI = TaskInstance.__table__.c
_RUN = DagRun.__table__.c
_POOL = Pool.__table__.c

WAITING = exists().where(is_scheduled(_TI.state), _TI.pool.in_(bindparam("pools", expanding=True)))
"""TIs wait in `scheduled` in the pools concerned (`backlog`)."""
UNCLAIMED = hot(
    "runs no job claimed",
    _RUN.claimed_by_job_id.is_(None),
    "The runs workers drive; the condition of the workers' queueing by priority.",
)
"""The runs workers drive (no job claimed them): one constant, so statements cache."""
LOCK_RUN = hot(
    "run lock",
    select(_RUN.run_id, _RUN.claimed_by_job_id, _RUN.dag_hash, _RUN.span_status)
    .where(
        _RUN.id == bindparam("run_pk"),
        expected_state(_RUN.state, [DagRunState.RUNNING.value]),  # by its key
    )
    .with_for_update(key_share=True),
    "The first statement of a result that decides its run. `state || ''`: no index covers "
    "it, so the row is reached by its key whatever the statistics (a generic plan made on "
    "a small table read the index on state). FOR NO KEY UPDATE: a TI's foreign-key check "
    "(FOR KEY SHARE) never waits on it.",
    twin=True,
)
"""`run_lock`'s SQLite twin."""
RUN_LOCK = hot_statement("run_lock", same_values(LOCK_RUN))
"""scheduler/core/sql/result.sql: its own statement (a statement that waits for a row
lock keeps the snapshot it started with for its other rows, so TIs read in it could
miss the holder's result)."""


def run_lock(run_pk: int) -> Sent:
    """`run_lock` of `run_pk`: the first statement of every result that decides its run's
    downstream (sent with its BEGIN)."""
    return RUN_LOCK, {"run_pk": run_pk}


class RunRow(Protocol):
    """A row of `LOCK_RUN`: the run, locked, running (none if it is not running)."""

    run_id: str
    claimed_by_job_id: int | None
    dag_hash: str
    span_status: str


class UnfinishedRow(Protocol):
    """What a result's UPDATE that counts returns (`leaf_write`; `fan_in_write` adds
    `backlog`): another TI it counts is unfinished, and the slots of the finished TI's
    pool, its row locked, if TIs wait in it (else None, nothing locked)."""

    unfinished: bool
    pool_total: int | None


class FanInRow(UnfinishedRow, Protocol):
    """A row of `fan_in_write`: also whether TIs wait in the pools concerned."""

    backlog: bool


class IndexRow(Protocol):
    """A row of `index_write`: another index is unfinished; TIs wait in its pool."""

    unfinished: bool
    backlog: bool


class TiRow(Protocol):
    """A row of `read_run_tis`/`read_named_tis`: a TI a decision needs."""

    id: int
    task_id: str
    state: str
    result: str | None
    """Only a branch task's (else None)."""
    try_number: int
    queue: str
    pool: str
    pool_slots: int
    priority_weight: int
    context_carrier: dict[str, Any] | None
    """Only a downstream's (else None)."""
    backlog: bool
    pool_total: int | None


class PickedRow(Protocol):
    """A row of `PICKED`: the TI a statement queued, its message's fields (the try
    number before the queueing bumped it)."""

    id: int
    dag_id: str
    run_id: str
    task_id: str
    try_number: int
    queue: str
    context_carrier: dict[str, Any]


class PickedWithAttemptRow(PickedRow, Protocol):
    """A row of `PICKED_WITH_ATTEMPT`: also the attempt id its queueing gave."""

    attempt_id: str


class ScheduledRow(Protocol):
    """A row of a write that moved a ready TI to `scheduled` (`OTHER_RUNS_WAIT`): its id,
    and whether TIs of other runs waited in its pool before it."""

    id: int
    backlog: bool


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
    WAITING.label("backlog"),
).where(_TI.dag_run_id == bindparam("run_pk"))
"""The SQLite twins' read of every TI of the run (`read_run_tis`), and of the TIs named
(`read_named_tis`), below."""
_READ = _READ_RUN.where(_TI.task_id.in_(bindparam("task_ids", expanding=True)))


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
"""NULL when `lock_pool` is: nothing locked."""
_READ_RUN_ON_SQLITE = hot("read run TIs (SQLite)", _READ_RUN.add_columns(_POOL_TOTAL), twin=True)
_READ_ON_SQLITE = hot("read named TIs (SQLite)", _READ.add_columns(_POOL_TOTAL), twin=True)
READ_RUN_TIS = hot_statement("read_run_tis", same_values(_READ_RUN_ON_SQLITE))
READ_NAMED_TIS = hot_statement("read_named_tis", same_values(_READ_ON_SQLITE))
"""scheduler/core/sql/decide.sql: the TIs a decision needs (the whole run's, or those
named), with the one pool row the ready downstream goes into locked when its plan says
so (`Plan.locks_pool`): one round trip fewer than locking the pool in a statement of its
own. Waiting for that lock inside the read is safe: the TIs it reads are the locked
run's, which no one else can change meanwhile; the statement that then counts the
pool's room starts after the lock was granted."""
WRITE_SUCCESS_READING = {
    READ_RUN_TIS.name: hot_statement("write_success_reading_run_tis", None),
    READ_NAMED_TIS.name: hot_statement("write_success_reading_named_tis", None),
}
"""scheduler/core/sql/decide.sql: a success fused with its decision's read (PostgreSQL
only: SQLite has no UPDATE in WITH, so it reads, then writes)."""


def read_statement(run_pk: int, plan: Plan) -> tuple[HotStatement, dict[str, Any]]:
    """The read of the TIs `plan`'s decision needs (and its pool's row locked when
    `plan.locks_pool`), with its parameters."""
    params: dict[str, Any] = {
        "run_pk": run_pk,
        "downstream": list(plan.downstream) or [""],
        "branches": list(plan.branches) or [""],
        "pools": list(plan.pools),
        "lock_pool": plan.pools[0] if plan.locks_pool else None,
    }
    if plan.whole_run:
        return READ_RUN_TIS, params
    params["task_ids"] = list(plan.read_ids)
    return READ_NAMED_TIS, params


def success_reading(
    read: tuple[HotStatement, dict[str, Any]],
    *,
    ti_id: int,
    attempt_id: str,
    now: dt.datetime,
    values: Mapping[str, Any],
) -> Sent:
    """`read` (of `read_statement`) fused with the try's success (`write_success`), for
    PostgreSQL: its rows have `moved` (1 if the write won) and the read's columns (None
    on the one row of an empty read)."""
    statement, params = read
    fused = WRITE_SUCCESS_READING[statement.name]
    return fused, {**params, **_success_values(ti_id, attempt_id, now, values)}


_OTHER = TaskInstance.__table__.alias("other")
_OF_RUN_UNFINISHED = (
    _OTHER.c.dag_run_id == bindparam("run_pk"),
    one_of(_OTHER.c.state, [state.value for state in TI_UNFINISHED]),
)
_POOL_TOTAL_IF_WAITING = _locked_pool_total(
    exists().where(is_scheduled(_TI.state), _TI.pool == bindparam("lock_pool"))
)
"""The slots of the finished TI's pool, its row locked, if TIs wait in it (the slot this
result frees goes to one of them); else NULL and nothing locked."""


def _fan_in_columns(names: ColumnElement[bool]) -> tuple[ColumnElement[Any], ...]:
    unfinished = exists().where(*_OF_RUN_UNFINISHED, names)  # the first found is enough
    return unfinished.label("unfinished"), WAITING.label("backlog"), _POOL_TOTAL_IF_WAITING


_FAN_IN_NOTE = (
    "Returned by a fan-in upstream's result UPDATE: EXISTS another unfinished upstream "
    "(the first found is enough; one equality per state on (dag_run_id, state)), TIs "
    "waiting in the pools, and the freed pool's slots, its row locked, if TIs wait in it."
)
FAN_IN_COUNTING = {
    Counted.OTHERS: hot(
        "fan-in counting: named others",
        _fan_in_columns(_OTHER.c.task_id.in_(bindparam("fan_in", expanding=True))),
        _FAN_IN_NOTE,
        twin=True,
    ),
    Counted.ALL_BUT: hot(
        "fan-in counting: all but the named",
        _fan_in_columns(_OTHER.c.task_id.not_in(bindparam("fan_in", expanding=True))),
        _FAN_IN_NOTE + " A wide fan-in names the few TIs that are not its upstreams.",
        twin=True,
    ),
}
"""Returned by the result's own UPDATE: whether any of a fan-in's other upstreams is
unfinished (named, or as all the run's TIs but the fewer others), whether TIs wait in
the pools, and the freed pool's slots with its row locked if TIs wait in it. One round
trip under the run's lock, whatever the fan-in's width (waiting there for the pool's
lock is safe, as for `_READ_LOCKING`)."""


SUCCESS_VALUES = frozenset({"result", "error", "next_retry_at"})
"""What a try's success writes besides its state and end_date (the runner's values)."""


def _success_values(
    ti_id: int, attempt_id: str, now: dt.datetime, values: Mapping[str, Any]
) -> dict[str, Any]:
    """The values of a `write_success*` statement (scheduler/core/sql/result.sql)."""
    if set(values) != SUCCESS_VALUES:
        raise ValueError(f"a success writes {sorted(SUCCESS_VALUES)}, not {sorted(values)}")
    return {"ti_id": ti_id, "attempt_id": attempt_id, "now": now, **values}


def _success_on_sqlite(returning: tuple[ColumnElement[Any], ...], *names: str) -> Twin:
    """The SQLite twin of a `write_success*` statement: `ti_move_returning`'s
    compare-and-set, returning `returning` (bound by the values `names`)."""

    def twin(values: Mapping[str, Any]) -> tuple[Executable, Mapping[str, Any]]:
        return ti_move_returning(
            values["ti_id"],
            TI.SUCCESS,
            expect=[TI.RUNNING],
            now=values["now"],
            returning=returning,
            attempt_id=values["attempt_id"],
            values={key: values[key] for key in SUCCESS_VALUES},
            params={name: values[name] for name in names},
        )

    return twin


WRITE_SUCCESS = hot_statement("write_success", _success_on_sqlite(()))
_FAN_IN_NAMES = ("run_pk", "pools", "fan_in", "lock_pool")
WRITE_SUCCESS_COUNTING = {
    Counted.OTHERS: hot_statement(
        "write_success_counting_named_upstreams",
        _success_on_sqlite(FAN_IN_COUNTING[Counted.OTHERS], *_FAN_IN_NAMES),
    ),
    Counted.ALL_BUT: hot_statement(
        "write_success_counting_all_but_named",
        _success_on_sqlite(FAN_IN_COUNTING[Counted.ALL_BUT], *_FAN_IN_NAMES),
    ),
}
"""scheduler/core/sql/result.sql: a fan-in upstream's success that counts the others."""


def success_write(
    *, ti_id: int, attempt_id: str, now: dt.datetime, values: Mapping[str, Any]
) -> Sent:
    """A try's success, running → success for `attempt_id` (`write_success`); one row
    if it won."""
    return WRITE_SUCCESS, _success_values(ti_id, attempt_id, now, values)


def fan_in_write(
    plan: Plan,
    *,
    run_pk: int,
    pool: str,
    ti_id: int,
    new: TaskInstanceState,
    attempt_id: str,
    now: dt.datetime,
    values: Mapping[str, Any],
) -> Sent:
    """The result's UPDATE running → `new` (a success: a plan has a fan-in only then)
    that also counts `plan`'s fan-in's other upstreams still unfinished (`plan.fan_in`,
    which must be set); its rows (one if it won) have `unfinished`, `backlog` and
    `pool_total`. To run under the run's lock."""
    assert plan.fan_in is not None
    if new is not TI.SUCCESS:
        raise ValueError(f"a fan-in's counting write is a success's, not {new}'s")
    check = {
        "run_pk": run_pk,
        "pools": list(plan.pools),
        "fan_in": list(plan.fan_in.names),
        "lock_pool": pool,
    }
    statement = WRITE_SUCCESS_COUNTING[plan.fan_in.counted]
    return statement, {**check, **_success_values(ti_id, attempt_id, now, values)}


_ME = TaskInstance.__table__.alias("finished")
_RUN_DRIVEN = exists().where(
    _RUN.id == bindparam("run_pk"),
    expected_state(_RUN.state, [DagRunState.RUNNING.value]),
    UNCLAIMED,
    _RUN.dag_hash == bindparam("dag_hash"),
    _RUN.span_status != SpanStatus.NEEDS_CONTINUANCE.value,
)
"""The run is a worker's to drive (as `drives` checks), of this DAG version."""


def drives(run: RunRow, dag: Dag) -> bool:
    """Whether a worker decides run `run` (a row of `run_lock`, the run running) from
    `dag`: no job claimed it, it is of that DAG version, and its spans need no
    scheduler to continue them (TIs must nest under the continuing span). The Python
    twin of `_RUN_DRIVEN`, for a run its result has locked already."""
    return (
        run.claimed_by_job_id is None
        and run.dag_hash == dag.version_hash
        and run.span_status != SpanStatus.NEEDS_CONTINUANCE
    )


_FINISHED_SUCCEEDED = exists().where(
    _ME.c.id == bindparam("finished_id"), expected_state(_ME.c.state, [TI.SUCCESS.value])
)
"""The upstream whose result is being written succeeded (the write before it won)."""
_THE_NEXT = (_TI.dag_run_id == bindparam("run_pk"), _TI.task_id == bindparam("next_task"))
_CHAIN_NEXT = hot(
    "chain next may be queued",
    and_(*_THE_NEXT, _RUN_DRIVEN, _FINISHED_SUCCEEDED, FITS_ITS_POOL_FIRST),
    "In the query that writes its upstream's success: the run is a worker's to drive, "
    "the upstream succeeded (the write before it won), nobody waits in the pool, room.",
    twin=True,
)
"""A chain's next TI, to queue in the query that writes its only upstream's success: of a
run a worker drives (as `drives` checks), that upstream succeeded (the write
before it won, or an earlier one did), nobody waits in its pool, which has room
(`FITS_ITS_POOL_FIRST`)."""

_UP = TaskInstance.__table__.alias("up")
OTHERS_SUCCEEDED = {
    counted: hot(
        f"every other upstream succeeded: {counted.value}",
        ~exists().where(
            _UP.c.dag_run_id == bindparam("run_pk"),
            _UP.c.task_id.in_(bindparam("fan_in", expanding=True))
            if counted is Counted.OTHERS
            else _UP.c.task_id.not_in(bindparam("fan_in", expanding=True)),
            _UP.c.state != TI.SUCCESS.value,
        ),
        "The all_success rule in SQL (a twin of tasks.trigger_rules.decide, checked by a "
        "parity test): no other upstream anything but a success.",
        twin=True,
    )
    for counted in Counted
}
_JOIN_NEXT = {
    counted: hot(
        f"join next may be queued: {counted.value}",
        and_(_CHAIN_NEXT, OTHERS_SUCCEEDED[counted]),
        "After its last upstream's result, under the run's lock: as for a chain's next, "
        "and every other upstream succeeded.",
        twin=True,
    )
    for counted in Counted
}
"""A fan-in to queue after its last upstream's result (`_CHAIN_NEXT`: the run a worker
drives, that upstream succeeded, room in the pool, nobody waiting), when no other
upstream (named, or all the run's TIs but the fewer others) is anything but a success.
Only the upstream whose write, under the run's lock, saw no other unfinished sends it,
again under the run's lock; the queueing is a compare-and-set."""

JOIN_READY = {
    counted: hot(
        f"join next is ready: {counted.value}",
        and_(*_THE_NEXT, _RUN_DRIVEN, _FINISHED_SUCCEEDED, OTHERS_SUCCEEDED[counted]),
        "After its last upstream's result, under the run's lock: the join may run (as "
        "for its queueing, but whether it fits): it joins the TIs waiting in its pool.",
        twin=True,
    )
    for counted in Counted
}
"""A fan-in its last upstream could not queue (`_JOIN_NEXT` but for the room or the TIs
waiting in its pool) that may run: it goes to `scheduled`, in the same query."""
FAN_OUT_READY = hot(
    "fan-out downstream is ready",
    and_(
        _TI.dag_run_id == bindparam("run_pk"),
        _TI.task_id.in_(bindparam("downstream", expanding=True)),
        _RUN_DRIVEN,
        _FINISHED_SUCCEEDED,
    ),
    "In the query that writes the success of their only upstream: the run is a worker's "
    "to drive and that upstream succeeded; by (dag_run_id, task_id), the unique index.",
    twin=True,
)
"""The downstream of a task whose success makes them all ready (`Plan.fan_out`): of a run
a worker drives, their upstream succeeded (the write before it won)."""
_ELSEWHERE = TaskInstance.__table__.alias("elsewhere")
_OTHER_RUNS_WAIT = exists().where(
    is_scheduled(_ELSEWHERE.c.state),
    _ELSEWHERE.c.pool == bindparam("r_pool"),
    _ELSEWHERE.c.dag_run_id != bindparam("run_pk"),
)
OTHER_RUNS_WAIT = hot(
    "other runs' TIs wait in the pool",
    (_OTHER_RUNS_WAIT.label("backlog"),),
    "Returned by the write that schedules a run's ready TIs, from the statement's "
    "snapshot (before its own write): TIs of other runs wait in the pool, from the "
    "partial index ix_task_instance_waiting.",
    twin=True,
)
PICKED = hot(
    "picked TI's message",
    (
        _TI.id,
        _TI.dag_id,
        _TI.run_id,
        _TI.task_id,
        (_TI.try_number - 1).label("try_number"),  # as before the queueing bumped it
        _TI.queue,
        _TI.context_carrier,
    ),
)
"""What a statement that picked and queued a TI returns: its message's fields."""


def fill_message(row: PickedRow, attempt_id: str, with_trace: bool = False) -> RunMessage:
    """The message of the TI a fill queued (`fill_statements`, `fill_freed_slot`)."""
    return new_try_message(
        row, attempt_id, dag_id=row.dag_id, run_id=row.run_id, with_trace=with_trace
    )


PICKED_WITH_ATTEMPT = hot(
    "picked TI's message and attempt", (*PICKED, _TI.attempt_id.label("attempt_id")), twin=True
)
"""PICKED with the attempt id the queueing gave (several TIs queued by one statement)."""

_RANKED_TI = TaskInstance.__table__.alias("ranked")
_IN_LINE = TaskInstance.__table__.alias("in_line")
_BY_PRIORITY = (_RANKED_TI.c.priority_weight.desc(), _RANKED_TI.c.id)
_RANKED = (
    select(
        _RANKED_TI.c.id,
        func.sum(_RANKED_TI.c.pool_slots).over(order_by=_BY_PRIORITY).label("slots"),
        func.row_number().over(order_by=_BY_PRIORITY).label("rank"),
    )
    .where(
        _RANKED_TI.c.dag_run_id == bindparam("run_pk"),
        _RANKED_TI.c.task_id.in_(bindparam("downstream", expanding=True)),
        _RANKED_TI.c.state == TI.NONE.value,
    )
    .subquery("ready")
)
FAN_OUT_RANK = hot("fan-out downstream's rank", _RANKED.c.rank, twin=True)
_POOL_ROOM, _DAG_ROOM = room_left(
    bindparam("r_pool"), bindparam("r_dag"), bindparam("r_max_active")
)
FAN_OUT_FITS = hot(
    "fan-out downstream fit, by priority",
    and_(
        _TI.id == _RANKED.c.id,
        _RANKED.c.slots <= _POOL_ROOM,
        _RANKED.c.rank <= _DAG_ROOM,
        ~exists().where(is_scheduled(_IN_LINE.c.state), _IN_LINE.c.pool == bindparam("r_pool")),
        _RUN_DRIVEN,
        _FINISHED_SUCCEEDED,
    ),
    "The downstream a success made ready, ranked by priority (then id) with their running "
    "total of slots: those within the pool's free slots and their DAG's room, when nobody "
    "waits in the pool (they would come first). The room is counted once, after the "
    "pool's lock, not once per TI.",
    twin=True,
)
"""A fan-out's ready downstream that go straight to `queued`: by priority, those whose
running total of slots fits the pool's free slots and whose rank fits their DAG's room
(`max_active_tasks`), if no TI waits in the pool; of a run a worker drives, their upstream
succeeded."""


def _queue_next_on_sqlite(condition: ColumnElement[bool], *names: str) -> Twin:
    """The SQLite twin of a `queue_chain_next`/`queue_join_next*` statement."""

    def twin(values: Mapping[str, Any]) -> tuple[Executable, Mapping[str, Any]]:
        params = {name: values[name] for name in names}
        params["r_max_active"] = values["max_active"]
        return queue_picked_statement(
            values["attempt_id"],
            now=values["now"],
            condition=condition,
            params=params,
            returning=PICKED,
            decided=True,
        )

    return twin


_NEXT_NAMES = ("run_pk", "next_task", "dag_hash", "finished_id")
QUEUE_CHAIN_NEXT = hot_statement(
    "queue_chain_next", _queue_next_on_sqlite(_CHAIN_NEXT, *_NEXT_NAMES)
)
QUEUE_JOIN_NEXT = {
    Counted.OTHERS: hot_statement(
        "queue_join_next_named",
        _queue_next_on_sqlite(_JOIN_NEXT[Counted.OTHERS], *_NEXT_NAMES, "fan_in"),
    ),
    Counted.ALL_BUT: hot_statement(
        "queue_join_next_all_but_named",
        _queue_next_on_sqlite(_JOIN_NEXT[Counted.ALL_BUT], *_NEXT_NAMES, "fan_in"),
    ),
}
"""scheduler/core/sql/result.sql: a chain's next TI, a fan-in, queued by a worker."""


def chain_next_statements(
    plan: Plan, dag: Dag, *, run_pk: int, finished_id: int, attempt_id: str, now: dt.datetime
) -> tuple[Sent, Sent]:
    """After the statement that writes a success of a task with `plan.chain_next`: its
    pool's row locked, then that next TI queued as `attempt_id` if it may be
    (`queue_chain_next`); the queueing's row (`PICKED`) makes the message."""
    assert plan.chain_next is not None
    values = _next_values(dag, plan.chain_next, run_pk, finished_id, attempt_id, now)
    return pool_lock(plan.pools[0]), (QUEUE_CHAIN_NEXT, values)


def join_next_statements(
    plan: Plan, dag: Dag, *, run_pk: int, finished_id: int, attempt_id: str, now: dt.datetime
) -> tuple[Sent, Sent]:
    """After the run's lock, once the last upstream (a task with `plan.join_next`) wrote
    its success: the fan-in's pool's row locked, then the fan-in queued as `attempt_id`
    if every upstream succeeded and it may be (`queue_join_next*`)."""
    assert plan.join_next is not None and plan.fan_in is not None
    values = _next_values(dag, plan.join_next, run_pk, finished_id, attempt_id, now)
    values["fan_in"] = list(plan.fan_in.names)
    return pool_lock(plan.pools[0]), (QUEUE_JOIN_NEXT[plan.fan_in.counted], values)


def _next_values(
    dag: Dag, next_task: str, run_pk: int, finished_id: int, attempt_id: str, now: dt.datetime
) -> dict[str, Any]:
    return {
        "run_pk": run_pk,
        "next_task": next_task,
        "dag_hash": dag.version_hash,
        "finished_id": finished_id,
        "max_active": dag.max_active_tasks,
        "attempt_id": attempt_id,
        "now": now,
    }


def _fill_on_sqlite(values: Mapping[str, Any]) -> tuple[Executable, Mapping[str, Any]]:
    """`queue_next_waiting`'s SQLite twin."""
    return queue_picked_statement(
        values["attempt_id"],
        now=values["now"],
        condition=NEXT_WAITING_FITS_ITS_POOL,
        params={"r_pool": values["pool"]},
        returning=PICKED,
    )


QUEUE_NEXT_WAITING = hot_statement("queue_next_waiting", _fill_on_sqlite)
"""scheduler/core/sql/result.sql: the slot a result freed, given to the first TI waiting."""


def fill_statements(pool: str, attempt_id: str, now: dt.datetime) -> tuple[Sent, Sent]:
    """The slot a result freed, as statements to send in one query: the pool's row
    locked, then the first TI waiting in it (priority, then age) queued as `attempt_id`
    if it fits (a statement of its own, so it counts the room after the lock was
    granted). Its row (`PICKED`) makes the message."""
    return pool_lock(pool), fill_statement(pool, attempt_id, now)


def fill_statement(pool: str, attempt_id: str, now: dt.datetime) -> Sent:
    """The queueing of `fill_statements` alone, for a query that locked `pool`'s row in
    an earlier statement."""
    return QUEUE_NEXT_WAITING, {"pool": pool, "attempt_id": attempt_id, "now": now}


_UNFINISHED = hot(
    "run has an unfinished TI (SQLite)",
    select(_TI.id)
    .where(
        _TI.dag_run_id == bindparam("run_pk"),
        one_of(_TI.state, [state.value for state in TI_UNFINISHED]),
    )
    .limit(1),
    twin=True,
)
RUN_HAS_AN_UNFINISHED_TI = hot_statement("run_has_an_unfinished_ti", same_values(_UNFINISHED))
"""scheduler/core/sql/decide.sql: whether a run has a TI left to finish (one row)."""


def _queue_if_room_on_sqlite(values: Mapping[str, Any]) -> tuple[Executable, Mapping[str, Any]]:
    """`queue_ti_if_room`'s SQLite twin."""
    room = {
        "r_pool": values["pool"],
        "r_slots": values["slots"],
        "r_pool_total": values["pool_total"],
        "r_dag": values["dag_id"],
        "r_max_active": values["max_active"],
    }
    return queue_ti_if_statement(
        values["ti_id"], values["attempt_id"], now=values["now"], condition=HAS_ROOM, params=room
    )


QUEUE_TI_IF_ROOM = hot_statement("queue_ti_if_room", _queue_if_room_on_sqlite)
"""scheduler/core/sql/decide.sql: one decided TI queued if its pool and DAG have room."""


LEAF_COUNTING = hot(
    "leaf result counts the run's other unfinished TIs",
    (
        exists().where(*_OF_RUN_UNFINISHED, _OTHER.c.id != _TI.id).label("unfinished"),
        _POOL_TOTAL_IF_WAITING,
    ),
    "What the result of a task with no downstream returns, under the run's lock: whether "
    "another TI of the run is unfinished (the first found is enough; one equality per "
    "state on (dag_run_id, state)), and the freed pool's slots, its row locked, if TIs "
    "wait in it.",
    twin=True,
)


WRITE_SUCCESS_COUNTING_THE_RUN = hot_statement(
    "write_success_counting_the_run",
    _success_on_sqlite(LEAF_COUNTING, "run_pk", "lock_pool"),
)
"""scheduler/core/sql/result.sql: a leaf's success, counting the run's other TIs."""


def leaf_write(
    *,
    run_pk: int,
    pool: str,
    ti_id: int,
    attempt_id: str,
    now: dt.datetime,
    values: Mapping[str, Any],
) -> Sent:
    """The success of a task with no downstream, running → success, returning
    `unfinished` (another TI of the run is) and `pool_total` (the slots of `pool`, its row
    locked, if TIs wait in it; else NULL). To send after the run's lock, in the same
    transaction: the lock serialises the run's results, so exactly one of the last two
    counts no other unfinished."""
    params = {"run_pk": run_pk, "lock_pool": pool}
    return WRITE_SUCCESS_COUNTING_THE_RUN, {
        **params,
        **_success_values(ti_id, attempt_id, now, values),
    }


_SIBLING = TaskInstance.__table__.alias("sibling")
_WAITER = TaskInstance.__table__.alias("waiter")
INDEX_COUNTING = hot(
    "index result counts the other indexes",
    (
        exists()
        .where(
            _SIBLING.c.dag_run_id == bindparam("run_pk"),
            one_of(_SIBLING.c.state, [state.value for state in TI_UNFINISHED]),
            _SIBLING.c.task_id == bindparam("counted_task"),
            _SIBLING.c.id != _TI.id,
        )
        .label("unfinished"),
        exists()
        .where(is_scheduled(_WAITER.c.state), _WAITER.c.pool == bindparam("lock_pool"))
        .label("backlog"),
    ),
    "What the result of a mapped task's index returns, under the run's lock: whether "
    "another index of the task is unfinished (by (dag_run_id, state)), and whether TIs "
    "wait in its pool for the slot it frees.",
    twin=True,
)


WRITE_SUCCESS_COUNTING_THE_INDEXES = hot_statement(
    "write_success_counting_the_indexes",
    _success_on_sqlite(INDEX_COUNTING, "run_pk", "counted_task", "lock_pool"),
)
"""scheduler/core/sql/result.sql: an index's success, counting the task's other indexes."""


def index_write(
    *,
    run_pk: int,
    task_id: str,
    pool: str,
    ti_id: int,
    attempt_id: str,
    now: dt.datetime,
    values: Mapping[str, Any],
) -> Sent:
    """The success of an index of mapped task `task_id`, running → success, returning
    `unfinished` (another index is) and `backlog` (TIs wait in `pool`). To send after the
    run's lock, in the same transaction."""
    params = {"run_pk": run_pk, "counted_task": task_id, "lock_pool": pool}
    return WRITE_SUCCESS_COUNTING_THE_INDEXES, {
        **params,
        **_success_values(ti_id, attempt_id, now, values),
    }


def _schedule_on_sqlite(condition: ColumnElement[bool], *names: str) -> Twin:
    """The SQLite twin of a `schedule_join_ready*`/`schedule_fan_out_ready` statement."""

    def twin(values: Mapping[str, Any]) -> tuple[Executable, Mapping[str, Any]]:
        params = {name: values[name] for name in names}
        params["r_pool"] = values["pool"]
        return schedule_where_statement(
            now=values["now"], condition=condition, params=params, returning=OTHER_RUNS_WAIT
        )

    return twin


_READY_NAMES = ("run_pk", "next_task", "dag_hash", "finished_id", "fan_in")
SCHEDULE_JOIN_READY = {
    counted: hot_statement(
        f"schedule_join_ready_{'named' if counted is Counted.OTHERS else 'all_but_named'}",
        _schedule_on_sqlite(JOIN_READY[counted], *_READY_NAMES),
    )
    for counted in Counted
}
"""scheduler/core/sql/result.sql: a fan-in its last upstream could not queue, scheduled."""


def join_ready_statement(
    plan: Plan, dag: Dag, *, run_pk: int, finished_id: int, now: dt.datetime
) -> Sent:
    """After `join_next_statements` in the same query: the fan-in, if that did not queue
    it and it may run (`schedule_join_ready*`), moved to `scheduled`; returns its id and
    `backlog` (TIs of other runs wait in its pool)."""
    assert plan.join_next is not None and plan.fan_in is not None
    values = {
        "run_pk": run_pk,
        "next_task": plan.join_next,
        "dag_hash": dag.version_hash,
        "finished_id": finished_id,
        "fan_in": list(plan.fan_in.names),
        "pool": plan.pools[0],
        "now": now,
    }
    return SCHEDULE_JOIN_READY[plan.fan_in.counted], values


def _fan_out_on_sqlite(values: Mapping[str, Any]) -> tuple[Executable, Mapping[str, Any]]:
    """`queue_fan_out`'s SQLite twin."""
    params = {
        "run_pk": values["run_pk"],
        "downstream": values["downstream"],
        "dag_hash": values["dag_hash"],
        "finished_id": values["finished_id"],
        "r_pool": values["pool"],
        "r_dag": values["dag_id"],
        "r_max_active": values["max_active"],
    }
    return queue_ranked_statement(
        values["attempt_ids"],
        now=values["now"],
        condition=FAN_OUT_FITS,
        rank=FAN_OUT_RANK,
        params=params,
        returning=PICKED_WITH_ATTEMPT,
    )


QUEUE_FAN_OUT = hot_statement("queue_fan_out", _fan_out_on_sqlite)
SCHEDULE_FAN_OUT_READY = hot_statement(
    "schedule_fan_out_ready",
    _schedule_on_sqlite(FAN_OUT_READY, "run_pk", "downstream", "dag_hash", "finished_id"),
)
"""scheduler/core/sql/result.sql: a fan-out's ready downstream, queued by priority while
they fit, the others scheduled."""


def fan_out_statements(
    plan: Plan,
    dag: Dag,
    *,
    run_pk: int,
    finished_id: int,
    attempt_ids: list[str],
    fill_attempt: str,
    now: dt.datetime,
) -> tuple[Sent, Sent, Sent, Sent]:
    """After the statement that writes the success of a task with `plan.fan_out`: the
    pool's row locked; its ready downstream that fit queued by priority when nobody waits
    in the pool (`FAN_OUT_FITS`, one of `attempt_ids` each, returning
    `PICKED_WITH_ATTEMPT`); the others moved to `scheduled` (`FAN_OUT_READY`, returning
    their ids and `backlog`); then the slot the result freed given to the first TI waiting
    in the pool (`fill_statement`, as `fill_attempt`)."""
    assert plan.fan_out is not None and len(attempt_ids) == len(plan.fan_out)
    pool = plan.pools[0]
    values = {
        "run_pk": run_pk,
        "downstream": list(plan.fan_out),
        "dag_hash": dag.version_hash,
        "finished_id": finished_id,
        "pool": pool,
        "now": now,
    }
    queued = {
        **values,
        "dag_id": dag.dag_id,
        "max_active": dag.max_active_tasks,
        "attempt_ids": list(attempt_ids),
    }
    return (
        pool_lock(pool),
        (QUEUE_FAN_OUT, queued),
        (SCHEDULE_FAN_OUT_READY, values),
        fill_statement(pool, fill_attempt, now),
    )
