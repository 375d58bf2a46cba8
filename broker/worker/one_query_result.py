"""Results committed in one query: a fan-in's upstream and a chain's link.

A success into a fan-in that waits for all its upstreams decides nothing while another
upstream is unfinished: its UPDATE counts them (`scheduler.scheduling.downstream.fan_in_write`).
With no log to store, that result is one query on PostgreSQL: BEGIN, the run's lock, the
UPDATE, COMMIT (`scheduler.core.db.committed_at_once`); the run's lock is held only while the
server runs them. What the UPDATE returned says what follows, each in its own query:
- another upstream unfinished and no TI waiting for the slot: nothing;
- TIs wait in the finished TI's pool: the pool's row locked and the first of them queued
  if it fits, in one more query (`fill_statements`; with spans to start, a transaction);
- the last upstream (the run's lock serialises the upstreams' UPDATEs, so exactly one of
  them counts no other unfinished), of an all_success fan-in in its pool
  (`Plan.join_next`): one more query queues the fan-in if every upstream succeeded and it
  fits (`join_next_statements`, under the run's lock again);
- else, or not queued so: a transaction that locks the run again, reads it, decides and
  queues the fan-in as a plain result does (a wide fan-in's: the schedulers, woken).

A success of a chain's link (`Plan.chain_next`: one downstream, whose only upstream it
is, in its pool, ready on its success) with no log to store is one query too: BEGIN, the
run's lock, the result's write, the pool's lock, the next TI queued if nobody waits in
its pool and it fits (`chain_next_statements`), COMMIT. Not queued, the decision follows
in a transaction of its own, as for a fan-in's last upstream.

Invariant: the result is committed before any decision that follows it; a worker that
dies in between leaves the decision to the schedulers' passes (a dropped follow-up query
wakes them), never a double queueing (every queueing is a compare-and-set).
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from sluice.broker.worker.retrying import retrying
from sluice.scheduler.core.db import Sent, committed_at_once, transaction_opened_by, utcnow
from sluice.scheduler.core.models import Dag
from sluice.scheduler.core.states import TI
from sluice.scheduler.core.transitions import ti_move_returning
from sluice.scheduler.scheduling.downstream import (
    FollowUp,
    Plan,
    chain_next_statements,
    drives,
    fan_in_write,
    fill_message,
    fill_statements,
    join_next_statements,
    lock_run,
    read_run,
    run_lock,
    schedule_downstream,
)

log = logging.getLogger("sluice.worker")


def result_statements(
    plan: Plan | None,
    *,
    run_pk: int,
    pool: str,
    ti_id: int,
    attempt_id: str,
    new: TI,
    now: dt.datetime,
    values: dict[str, Any],
) -> list[Sent] | None:
    """What a result transaction sends with its BEGIN when a worker decides the
    downstream (`plan`): the run's lock, and for a success into a fan-in the result's
    UPDATE that counts the other upstreams (its own snapshot, taken after the lock)."""
    if plan is None:
        return None
    fan_in = fan_in_write(
        plan,
        run_pk=run_pk,
        pool=pool,
        ti_id=ti_id,
        new=new,
        expect=[TI.RUNNING],
        attempt_id=attempt_id,
        now=now,
        values=values,
    )
    lock = run_lock(run_pk)
    return [lock] if fan_in is None else [lock, fan_in]


@dataclass(frozen=True)
class Success:
    """A try's success to record: its TI, run and pool, and the values it writes."""

    run_pk: int
    task_id: str
    pool: str
    ti_id: int
    attempt_id: str
    values: dict[str, Any]


def records_at_once(plan: Plan, with_trace: bool) -> bool:
    """Whether `record_at_once` records a success of `plan` (a fan-in's upstream; a
    chain's link, without spans to start)."""
    return plan.fan_in is not None or (plan.chain_next is not None and not with_trace)


def record_at_once(
    factory: sessionmaker[Session], plan: Plan, dag: Dag, done: Success, *, with_trace: bool
) -> FollowUp | None:
    """Record `done` in one query, then what follows (module doc), for a plan that
    `records_at_once`; None if the compare-and-set lost (nothing was written)."""
    if plan.fan_in is not None:
        return _fan_in_at_once(factory, plan, dag, done, with_trace)
    return _chain_at_once(factory, plan, dag, done)


def _fan_in_at_once(
    factory: sessionmaker[Session], plan: Plan, dag: Dag, done: Success, with_trace: bool
) -> FollowUp | None:
    sent: list[list[Any]] = []

    def write() -> bool:
        statements = result_statements(
            plan,
            run_pk=done.run_pk,
            pool=done.pool,
            ti_id=done.ti_id,
            attempt_id=done.attempt_id,
            new=TI.SUCCESS,
            now=utcnow(),
            values=done.values,
        )
        assert statements is not None and len(statements) == 2
        sent[:] = committed_at_once(factory, statements) or [[], []]
        return bool(sent[1])

    if not retrying(write):
        return None
    run, row = (sent[0] or [None])[0], sent[1][0]
    if run is None or not drives(run, dag):
        return FollowUp(wake=True)
    if row.unfinished and row.pool_total is None:
        return FollowUp()
    if row.unfinished and not with_trace:
        return _then(done, lambda: _fill(factory, done.pool))
    if not row.unfinished and plan.join_next is not None and not with_trace:
        return _then(done, lambda: _queue_join(factory, plan, dag, done))
    if plan.wide:  # a slot to fill with spans to start: the schedulers decide
        return FollowUp(wake=True)
    waiting = bool(row.unfinished)
    return _then(done, lambda: _decide_after(factory, dag, done, waiting, with_trace))


def _queue_join(factory: sessionmaker[Session], plan: Plan, dag: Dag, done: Success) -> FollowUp:
    """After the last upstream's result: the fan-in queued in one query (the run's lock,
    its pool's lock, the queueing if every upstream succeeded and it fits:
    `join_next_statements`); not queued, decided as a plain result's downstream is."""
    attempt_id = str(uuid.uuid4())
    joined = join_next_statements(
        plan, dag, run_pk=done.run_pk, finished_id=done.ti_id, attempt_id=attempt_id, now=utcnow()
    )
    sent = committed_at_once(factory, [run_lock(done.run_pk), *joined]) or [[], [], []]
    if sent[2]:
        return FollowUp([fill_message(queued, attempt_id) for queued in sent[2]])
    if plan.wide:  # a failed upstream, no room: the schedulers decide (they read the run)
        return FollowUp(wake=True)
    return _decide_after(factory, dag, done, False, False)


def _chain_at_once(
    factory: sessionmaker[Session], plan: Plan, dag: Dag, done: Success
) -> FollowUp | None:
    sent: list[list[Any]] = []
    next_attempt = str(uuid.uuid4())

    def write() -> bool:
        now = utcnow()
        move = ti_move_returning(
            done.ti_id,
            TI.SUCCESS,
            expect=[TI.RUNNING],
            now=now,
            returning=(),
            attempt_id=done.attempt_id,
            values=done.values,
        )
        queue_next = chain_next_statements(
            plan, dag, run_pk=done.run_pk, finished_id=done.ti_id, attempt_id=next_attempt, now=now
        )
        statements = [run_lock(done.run_pk), move, *queue_next]
        sent[:] = committed_at_once(factory, statements) or [[], [], [], []]
        return bool(sent[1])

    if not retrying(write):
        return None
    run = (sent[0] or [None])[0]
    if run is None or not drives(run, dag):
        return FollowUp(wake=True)
    if sent[3]:
        return FollowUp([fill_message(row, next_attempt) for row in sent[3]])
    # not queued: no room, TIs waiting, the DAG at max_active_tasks, or not `none`
    return _then(done, lambda: _decide_after(factory, dag, done, False, False))


def _then(done: Success, follow: Callable[[], FollowUp]) -> FollowUp:
    """What follows a committed result; the schedulers' if it fails (a dropped
    connection: the result stays written, they decide on their next pass)."""
    try:
        return follow()
    except OperationalError as exc:
        log.warning(
            "deciding after the result of ti %s failed, the schedulers will: %s", done.ti_id, exc
        )
        return FollowUp(wake=True)


def _fill(factory: sessionmaker[Session], pool: str) -> FollowUp:
    """The slot the result freed to the first TI waiting in `pool`, in one query."""
    attempt_id = str(uuid.uuid4())
    sent = committed_at_once(factory, fill_statements(pool, attempt_id, utcnow())) or [[], []]
    return FollowUp([fill_message(row, attempt_id) for row in sent[1]])


def _decide_after(
    factory: sessionmaker[Session], dag: Dag, done: Success, waiting: bool, with_trace: bool
) -> FollowUp:
    """In a transaction of its own under the run's lock: the downstream of `done` decided
    and queued (a fan-in after its last upstream, a chain link's next that could not be
    queued in its query; the stored result passes on: a branch's choice), or, while other
    upstreams are `waiting`, the slot it freed filled."""
    run_pk, task_id, pool = done.run_pk, done.task_id, done.pool
    result = done.values.get("result")
    with transaction_opened_by(factory, [run_lock(run_pk)]) as (session, opened):
        now = utcnow()
        locked = lock_run(
            session,
            run_pk=run_pk,
            task_id=task_id,
            pool=pool,
            dag=dag,
            opened=opened[0] if opened else None,
        )
        if locked is None:
            return FollowUp(wake=True)
        if waiting:
            locked = replace(locked, waiting=True, backlog=True)
        else:
            locked = read_run(session, locked)
        return schedule_downstream(
            session, locked, finished=TI.SUCCESS, result=result, now=now, with_trace=with_trace
        )
