"""The worker's "mini scheduler": decide and queue a finished TI's direct downstream.

Called in the worker's result transaction (the run's lock before the result's
compare-and-set, `schedule_downstream` after it won), so a hop (end of task i → start
of task i+1) needs no scheduler round trip: the worker decides the downstream tasks of
what it just finished, queues the ready ones that fit their pool and DAG limits, and
publishes after its commit (Airflow's `schedule_after_task_execution`, carried on to
queueing). What a decision needs of the DAG is its `plans.Plan`; the statements are in
`downstream_sql`; which of them a result sends is its path's
(`sluice.broker.worker.result`).

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
- A ready TI of a task with a rate limit goes to `scheduled` for the schedulers (who
  take its token, `decide.limited`), which are woken; one with a concurrency limit is
  queued as any other (its key is computed, and its slot taken, at its claim).
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

from sqlalchemy.orm import Session

from sluice.scheduler.core.db import executed
from sluice.scheduler.core.messages import RunMessage
from sluice.scheduler.core.models import Dag
from sluice.scheduler.core.queries.tis import lock_pools
from sluice.scheduler.core.states import TI, TI_UNFINISHED, TaskInstanceState
from sluice.scheduler.core.transitions import move_ti, move_tis, queue_tis
from sluice.scheduler.decide import spans
from sluice.scheduler.decide.decisions import TiView
from sluice.scheduler.decide.deps import decide_one
from sluice.scheduler.decide.downstream_sql import (
    QUEUE_TI_IF_ROOM,
    RUN_HAS_AN_UNFINISHED_TI,
    UNCLAIMED,
    FanInRow,
    PickedRow,
    RunRow,
    TiRow,
    drives,
    fill_message,
    fill_statement,
    read_statement,
    success_reading,
)
from sluice.scheduler.decide.plans import FILL_LIMIT, Plan
from sluice.scheduler.decide.queueing import Capacity, new_try_message, queue_scheduled


@dataclass
class FollowUp:
    """What the result transaction did for the run: messages to send after the commit,
    and whether the schedulers must still look at the run (`wake`)."""

    messages: list[RunMessage] = field(default_factory=list)
    wake: bool = False


@dataclass(frozen=True)
class LockedRun:
    """A run locked in the result transaction (`locked_run`); after `write_result`, the
    TIs the decision needs (`plan.needed`) as read then."""

    run_pk: int
    run_id: str
    dag: Dag
    task_id: str
    pool: str
    """The finished TI's pool: the slot its result frees."""
    plan: Plan
    rows: list[TiRow] = field(default_factory=list)
    backlog: bool = False
    """TIs wait in `scheduled` in the pools concerned (read before the pool lock: one that
    starts waiting meanwhile is treated as arriving after this decision)."""
    waiting: bool = False
    """The one downstream waits for other upstreams still unfinished (`rows` is empty):
    nothing to decide, and the run is not over."""
    pool_total: int | None = None
    """The slots of the finished TI's pool when this transaction locked its row already
    (`Plan.locks_pool`, `_POOL_TOTAL_IF_WAITING`), else None."""


def locked_run(
    plan: Plan | None, run: RunRow | None, *, run_pk: int, task_id: str, pool: str, dag: Dag | None
) -> LockedRun | None:
    """The run the result transaction locked (`run`: the row of `downstream_sql.run_lock`,
    None if the run is not running), to decide `task_id`'s downstream by `plan`; None if
    this worker may not decide it (no plan, claimed by a job, of another DAG version, its
    spans waiting for a scheduler to continue them).

    The lock is taken in the result transaction BEFORE the result is written, so it is
    held when the result becomes visible to others: every decision sees every result.
    `dag` is the (cached, read-only) DAG row the worker ran the task from; `pool` is the
    finished TI's pool, whose freed slot waiting TIs may want.
    """
    if dag is None or plan is None or run is None or not drives(run, dag):
        return None
    return LockedRun(run_pk, run.run_id, dag, task_id, pool, plan)


def write_result(
    session: Session,
    locked: LockedRun,
    *,
    ti_id: int,
    new: TaskInstanceState,
    attempt_id: str,
    now: dt.datetime,
    values: Mapping[str, Any],
    fan_in_rows: list[FanInRow] | None = None,
) -> LockedRun | None:
    """The result's compare-and-set running → `new` under the run's lock, then what
    deciding its downstream needs; None if the result lost (nothing is read).

    A success into a fan-in that waits for all its upstreams was written by its UPDATE
    that counts the others (`downstream_sql.fan_in_write`, sent with the run's lock):
    `fan_in_rows` are its rows (`after_fan_in_write`)."""
    plan = locked.plan
    if plan.fan_in is not None:
        assert fan_in_rows is not None, "a fan-in's result is written with the run's lock"
        return after_fan_in_write(session, locked, fan_in_rows[0]) if fan_in_rows else None
    read = read_statement(locked.run_pk, plan)
    if new is TI.SUCCESS and session.get_bind().dialect.name == "postgresql":
        fused = success_reading(read, ti_id=ti_id, attempt_id=attempt_id, now=now, values=values)
        rows = executed(session, fused)  # the read sees the TI as before its write
        if not rows or not rows[0].moved:
            return None
    else:  # SQLite has no UPDATE in WITH; another outcome is rare: read, then write
        rows = executed(session, read)
        moved = move_ti(
            session, ti_id, new, expect=[TI.RUNNING], attempt_id=attempt_id, now=now, values=values
        )
        if not moved:
            return None
    return _with_rows(locked, [row for row in rows if row.task_id in plan.needed])


def after_fan_in_write(session: Session, locked: LockedRun, row: FanInRow) -> LockedRun:
    """`locked` after a fan-in's upstream wrote its success (`row`: what its UPDATE
    returned): waiting while another upstream is unfinished (the run's TIs are not
    read), else, the last result, with the TIs its decision needs."""
    locked = replace(locked, pool_total=row.pool_total)
    if row.unfinished:
        return replace(locked, backlog=bool(row.backlog), waiting=True)
    return read_run(session, locked)  # the last result: the others finished


def read_run(session: Session, locked: LockedRun) -> LockedRun:
    """`locked` with the TIs its decision needs, read now (under the run's lock, the
    result written: in this transaction or committed before it)."""
    rows = executed(session, read_statement(locked.run_pk, locked.plan))
    return _with_rows(locked, [row for row in rows if row.task_id in locked.plan.needed])


def _with_rows(locked: LockedRun, rows: list[TiRow]) -> LockedRun:
    if locked.plan.locks_pool:
        locked = replace(locked, pool_total=rows[0].pool_total)
    return replace(locked, rows=rows, backlog=bool(rows[0].backlog))


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
    rated = [r.id for r in ready if "rate_limit" in tasks[r.task_id]]
    if rated:  # a rate limit's token is taken by a scheduler's pass
        move_tis(session, rated, TI.SCHEDULED, expect=[TI.NONE], now=now)
        ready = [r for r in ready if r.id not in rated]
        follow.wake = True
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
            runs=UNCLAIMED,
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
    one statement that picks the TI (SKIP LOCKED), checks its room and queues it
    (`queue_next_waiting`). A TI that does not fit (its DAG at max_active_tasks) is left
    to the schedulers' passes."""
    if total is None and lock_pools(session, [pool]).get(pool) is None:
        return []  # no such pool
    attempt_id = str(uuid.uuid4())
    rows: list[PickedRow] = executed(session, fill_statement(pool, attempt_id, now))
    return [fill_message(row, attempt_id, with_trace) for row in rows]


def _decide(
    session: Session,
    locked: LockedRun,
    tasks: Mapping[str, Any],
    downstream: list[str],
    finished: TaskInstanceState,
    result: str | None,
    now: dt.datetime,
    follow: FollowUp,
) -> list[TiRow]:
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
    ready: list[TiRow] = []
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
    ready: list[TiRow],
    now: dt.datetime,
    follow: FollowUp,
    with_trace: bool,
) -> list[RunMessage]:
    """Queue the ready TIs that fit (pool rows locked FOR UPDATE); the rest go to
    `scheduled` for the schedulers, which are then woken. One TI (a chain's next) is
    queued by one statement that checks its room itself (`queue_ti_if_room`), its pool's row
    locked by the result's read (`Plan.locks_pool`) or by a statement of its own."""
    dag, run_id = locked.dag, locked.run_id
    queued: list[tuple[TiRow, str]] = []
    later: list[int] = []
    if len(ready) == 1:
        row, attempt_id = ready[0], str(uuid.uuid4())
        total = locked.pool_total
        if total is None or row.pool != locked.pool:
            total = lock_pools(session, [row.pool]).get(row.pool, 0)
        room = {
            "ti_id": row.id,
            "attempt_id": attempt_id,
            "now": now,
            "pool": row.pool,
            "slots": row.pool_slots,
            "pool_total": total,
            "dag_id": dag.dag_id,
            "max_active": dag.max_active_tasks,
        }
        if executed(session, (QUEUE_TI_IF_ROOM, room)):
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
    return bool(executed(session, (RUN_HAS_AN_UNFINISHED_TI, {"run_pk": locked.run_pk})))
