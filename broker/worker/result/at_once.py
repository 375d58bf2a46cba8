"""Results committed in one query: a fan-in's upstream (`fan_in_at_once`), a chain's
link (`chain_at_once`), a fan-out's root (`fan_out_at_once`), a task with no downstream
(`leaf_at_once`) and an index of a mapped task (`index_at_once`), each a success with no
log to store.

A success into a fan-in that waits for all its upstreams decides nothing while another
upstream is unfinished: its UPDATE counts them (`downstream_sql.fan_in_write`). So the
result is one query: BEGIN, the run's lock, the UPDATE, COMMIT; the run's lock is held
only while the server runs them. What the UPDATE returned says what follows (`then`),
each in its own query:
- another upstream unfinished and no TI waiting for the slot: nothing (`nothing`);
- TIs wait in the finished TI's pool: the pool's row locked and the first of them queued
  if it fits, in one more query (`fill`; with spans to start, a transaction: `decide`);
  or in the result's own query (`filled`, or `nothing` when none fitted) when this
  process's last fan-in result in that pool found TIs waiting (`_BACKLOG`): a pool
  with a backlog costs one round trip a result, not two, and a pool without one is
  not locked by results that leave nothing waiting;
- the last upstream (the run's lock serialises the upstreams' UPDATEs, so exactly one of
  them counts no other unfinished), of an all_success fan-in in its pool
  (`Plan.join_next`): one more query, under the run's lock again, queues the fan-in if
  every upstream succeeded, nobody waits in its pool and it fits, else moves it to
  `scheduled` if every upstream succeeded, and fills the freed slot unless the result's
  query did (`join`);
- else (an upstream did not succeed): a transaction that locks the run again, reads it,
  decides the fan-in as `decided` does (`decide`; a wide fan-in's: the schedulers, `wake`).

A success of a chain's link (`Plan.chain_next`: one downstream, whose only upstream it
is, in its pool, ready on its success) is one query too: BEGIN, the run's lock, the
result's write, the pool's lock, the next TI queued if nobody waits in its pool and it
fits, COMMIT (`queued`). Not queued, the decision follows in a transaction (`decide`).

A success whose several downstream wait for it alone, in its pool (`Plan.fan_out`), is one
query: the run's lock, the result, the pool's lock, the downstream that fit queued by
priority when nobody waits in the pool (the room counted once for all of them), the
others moved to `scheduled`, the freed slot given to the first TI waiting (`queued`,
`waiting`, or `wake` when one was left with no other run's TI before it).

A success of a task with no downstream decides nothing: its UPDATE says whether another
TI of the run is unfinished (under the run's lock, so exactly one of the run's last two
results counts none) and whether TIs wait in its pool. The run's last unfinished TI wakes
the schedulers, which end the run; a freed slot is filled as a fan-in upstream's is.

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

from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from sluice.broker.worker.result.case import Case, Path, Recorded, Then
from sluice.broker.worker.retrying import retrying
from sluice.scheduler.core.db import (
    Handle,
    Pipeline,
    Sent,
    committed_at_once,
    transaction,
    transaction_opened_by,
    utcnow,
)
from sluice.scheduler.core.messages import RunMessage
from sluice.scheduler.core.states import TI
from sluice.scheduler.decide import spans
from sluice.scheduler.decide.downstream import (
    FollowUp,
    fill_freed_slot,
    locked_run,
    read_run,
    schedule_downstream,
)
from sluice.scheduler.decide.downstream_sql import (
    IndexRow,
    PickedRow,
    PickedWithAttemptRow,
    RunRow,
    ScheduledRow,
    UnfinishedRow,
    chain_next_statements,
    drives,
    fan_in_write,
    fan_out_statements,
    fill_message,
    fill_statement,
    fill_statements,
    index_write,
    join_next_statements,
    join_ready_statement,
    leaf_write,
    run_lock,
    success_write,
)
from sluice.scheduler.decide.plans import Plan

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Chained:
    """What a chain link's one query returned, its result written."""

    run: RunRow | None
    queued: list[PickedRow]
    """The next TI, if the query queued it."""


def chain_at_once(case: Case) -> Recorded:
    """A chain link's success and its next TI's queueing in one query (module doc):
    `queued`; not queued, the decision follows in a transaction (`decide`); a run the
    worker may not drive, the schedulers (`wake`)."""
    plan = case.plan
    assert plan is not None and plan.chain_next is not None and case.dag is not None
    dag = case.dag
    next_attempt = str(uuid.uuid4())

    def write() -> _Chained | None:
        now = utcnow()
        pipeline, lock, result = success_pipeline(case, now)
        pool_lock, queue = chain_next_statements(
            plan, dag, run_pk=case.run_pk, finished_id=case.ti_id, attempt_id=next_attempt, now=now
        )
        pipeline.add(pool_lock, "pool lock")
        queued = pipeline.add(queue, "next queued")
        sent = committed_at_once(case.factory, pipeline)
        return _Chained(sent.first(lock), sent[queued]) if sent[result] else None

    chained = retrying(write)
    if chained is None:  # the compare-and-set lost
        return Recorded(False, None, Path.CHAIN_AT_ONCE)
    if chained.run is None or not drives(chained.run, dag):
        return _recorded(Path.CHAIN_AT_ONCE, case, Then.WAKE, lambda: FollowUp(wake=True))
    if chained.queued:
        messages = [fill_message(row, next_attempt) for row in chained.queued]
        return Recorded(True, FollowUp(messages), Path.CHAIN_AT_ONCE, Then.QUEUED)
    # not queued: no room, TIs waiting, the DAG at max_active_tasks, or not `none`
    return _recorded(Path.CHAIN_AT_ONCE, case, Then.DECIDE, lambda: _decide_after(case, False))


@dataclass(frozen=True)
class _FannedOut:
    """What a fan-out's one query returned, its result written."""

    run: RunRow | None
    queued: list[PickedWithAttemptRow]
    scheduled: list[ScheduledRow]
    filled: list[PickedRow]


def fan_out_at_once(case: Case) -> Recorded:
    """A success that makes several downstream ready (`Plan.fan_out`: this task their only
    upstream, in its pool) and their queueing, in one query: BEGIN, the run's lock, the
    result, the pool's lock, the ready downstream that fit queued by priority when nobody
    waits in the pool (the room counted once), the others moved to `scheduled`, the slot
    the result freed given to the first TI waiting, COMMIT. Then nothing (`queued`; or
    `waiting`: some wait behind other runs' TIs); a run the worker may not drive, a
    downstream neither queued nor scheduled, or one left waiting with no other run's TI
    before it (no room, its DAG at max_active_tasks): the schedulers are woken, as after
    `decided`."""
    plan = case.plan
    assert plan is not None and plan.fan_out is not None and case.dag is not None
    dag = case.dag
    attempt_ids = [str(uuid.uuid4()) for _ in plan.fan_out]
    fill_attempt = str(uuid.uuid4())

    def write() -> _FannedOut | None:
        now = utcnow()
        pipeline, lock, result = success_pipeline(case, now)
        pool_lock, queue, ready, fill = fan_out_statements(
            plan,
            dag,
            run_pk=case.run_pk,
            finished_id=case.ti_id,
            attempt_ids=attempt_ids,
            fill_attempt=fill_attempt,
            now=now,
        )
        pipeline.add(pool_lock, "pool lock")
        queued = pipeline.add(queue, "ready queued")
        scheduled = pipeline.add(ready, "ready scheduled")
        filled = pipeline.add(fill, "slot filled")
        sent = committed_at_once(case.factory, pipeline)
        if not sent[result]:
            return None
        return _FannedOut(sent.first(lock), sent[queued], sent[scheduled], sent[filled])

    out = retrying(write)
    if out is None:  # the compare-and-set lost
        return Recorded(False, None, Path.FAN_OUT_AT_ONCE)
    messages = [fill_message(row, row.attempt_id) for row in out.queued]
    messages += [fill_message(row, fill_attempt) for row in out.filled]
    left = _left_waiting(out.scheduled, messages)
    wake = (
        out.run is None
        or not drives(out.run, dag)
        or len(out.queued) + len(out.scheduled) < len(plan.fan_out)
        or (left and not out.scheduled[0].backlog)  # no room, or the DAG at max_active_tasks
    )
    then = Then.WAKE if wake else Then.WAITING if left else Then.QUEUED
    return Recorded(True, FollowUp(messages, wake=wake), Path.FAN_OUT_AT_ONCE, then)


def fan_in_at_once(case: Case) -> Recorded:
    """A fan-in's upstream's success in one query, then what follows (module doc). When
    this process's last such result found TIs waiting in the pool (`_BACKLOG`), the
    freed slot is filled in the same query (`fill_statements`), as an index's is."""
    plan = case.plan
    assert plan is not None and plan.fan_in is not None and case.dag is not None
    written = _written_with_fill(
        case,
        lambda now: fan_in_write(
            plan,
            run_pk=case.run_pk,
            pool=case.pool,
            ti_id=case.ti_id,
            new=TI.SUCCESS,
            attempt_id=case.attempt_id,
            now=now,
            values=case.values,
        ),
    )
    if written is None:  # the compare-and-set lost
        return Recorded(False, None, Path.FAN_IN_AT_ONCE)
    run, row, filled = written.run, written.row, written.filled
    then: tuple[Then, Callable[[], FollowUp]]
    if run is None or not drives(run, case.dag):
        then = (Then.WAKE, lambda: FollowUp(wake=True))
    elif row.unfinished and (row.pool_total is None or written.filled_in_query):
        then = (Then.FILLED if filled else Then.NOTHING, FollowUp)
    elif row.unfinished and not case.tracing:
        then = (Then.FILL, lambda: _fill(case))
    elif not row.unfinished and plan.join_next is not None and not case.tracing:
        then = (Then.JOIN, lambda: _queue_join(case, plan, fill=not written.filled_in_query))
    elif plan.wide:  # a slot to fill with spans to start: the schedulers decide
        then = (Then.WAKE, lambda: FollowUp(wake=True))
    else:
        waiting = bool(row.unfinished)
        then = (Then.DECIDE, lambda: _decide_after(case, waiting))
    recorded = _recorded(Path.FAN_IN_AT_ONCE, case, *then)
    if filled and recorded.follow is not None:
        recorded.follow.messages[:0] = filled  # sent first: queued first, by the pool's order
    return recorded


def leaf_at_once(case: Case) -> Recorded:
    """A quiet success of a task with no downstream in one query: BEGIN, the run's lock,
    the UPDATE that writes it and says whether another TI of the run is unfinished and
    whether TIs wait in its pool (the pool's lock and the fill sent with it when this
    process's last result in that pool found TIs waiting: `_BACKLOG`), COMMIT. Then the
    run's last unfinished TI wakes the schedulers, which end the run (`wake`); a freed
    slot TIs wait for is filled in one more query (`fill`; with spans to start, a
    transaction) unless the result's own query filled it (`filled`, or `nothing`)."""
    assert case.dag is not None
    written = _written_with_fill(
        case,
        lambda now: leaf_write(
            run_pk=case.run_pk,
            pool=case.pool,
            ti_id=case.ti_id,
            attempt_id=case.attempt_id,
            now=now,
            values=case.values,
        ),
    )
    if written is None:  # the compare-and-set lost
        return Recorded(False, None, Path.LEAF_AT_ONCE)
    run, row, filled = written.run, written.row, written.filled
    driven = run is not None and drives(run, case.dag)
    wake = not driven or not row.unfinished
    if not driven or row.pool_total is None or written.filled_in_query:
        then = Then.WAKE if wake else Then.FILLED if filled else Then.NOTHING
        return Recorded(True, FollowUp(filled, wake=wake), Path.LEAF_AT_ONCE, then)
    fill = _fill_with_spans if case.tracing else _fill
    then = Then.FILL_AND_WAKE if wake else Then.FILL
    return _recorded(Path.LEAF_AT_ONCE, case, then, lambda: replace(fill(case), wake=wake))


_BACKLOG: dict[str, bool] = {}
"""Pool name → whether this process's last fan-in result found TIs waiting in it (the
UPDATE's `pool_total`). A hint only: with it, the next result fills the slot it frees in
its own query (the pool's lock then taken whatever waits); without it, a result that
finds TIs waiting fills in one more query. Either way the fill is the same
compare-and-set, so a wrong guess costs a lock or a round trip, never a double queueing."""


@dataclass(frozen=True)
class _Written:
    """What a result's one query (`_written_with_fill`) returned, its result written."""

    run: RunRow | None
    """The run's row read by its lock (None: the run is gone or not running)."""
    row: UnfinishedRow
    """The result UPDATE's row."""
    filled: list[RunMessage]
    """The TI the query's own fill queued, if it sent one."""
    filled_in_query: bool
    """The query held the pool's lock and the fill (the process's backlog hint)."""


def _written_with_fill(case: Case, result_of: Callable[[dt.datetime], Sent]) -> _Written | None:
    """The run's lock and the result's UPDATE (`result_of(now)`, which returns
    `unfinished` and `pool_total`) in one query, with the pool's lock and the fill of the
    slot it frees when this process's last result in that pool found TIs waiting
    (`_BACKLOG`, updated here from `pool_total`); None if the result's compare-and-set
    lost."""
    attempt_id = str(uuid.uuid4())

    def write() -> _Written | None:
        now = utcnow()
        pipeline = Pipeline()
        lock = pipeline.add(run_lock(case.run_pk), "run lock")
        result = pipeline.add(result_of(now), "result")
        queued = None
        if _BACKLOG.get(case.pool) and not case.tracing:
            pool_lock, queue = fill_statements(case.pool, attempt_id, now)
            pipeline.add(pool_lock, "pool lock")
            queued = pipeline.add(queue, "waiting TI queued")
        sent = committed_at_once(case.factory, pipeline)
        row: UnfinishedRow | None = sent.first(result)
        if row is None:
            return None
        filled = [fill_message(r, attempt_id) for r in sent[queued]] if queued is not None else []
        return _Written(sent.first(lock), row, filled, queued is not None)

    written = retrying(write)
    if written is not None:
        _BACKLOG[case.pool] = written.row.pool_total is not None
    return written


@dataclass(frozen=True)
class _Indexed:
    """What an index's one query returned, its result written."""

    run: RunRow | None
    row: IndexRow
    filled: list[RunMessage] | None
    """The TI the query's fill queued (None: no fill sent, spans to start)."""


def index_at_once(case: Case) -> Recorded:
    """A quiet success of one index of a mapped task whose downstream waits for every
    index, in one query: BEGIN, the run's lock, the UPDATE that writes it and says whether
    another index is unfinished, the freed slot given to the first TI waiting in its pool
    (its row locked, then the TI queued if it fits), COMMIT. Then the last index wakes the
    schedulers to decide the downstream (`wake`); another sends what it queued (`filled`,
    or `nothing`). With spans to start, the fill is a transaction of its own after."""
    assert case.dag is not None

    def write() -> _Indexed | None:
        now = utcnow()
        pipeline, lock, result = index_result_pipeline(case, now)
        attempt_id = str(uuid.uuid4())
        queued = None
        if not case.tracing:
            pool_lock, queue = fill_statements(case.pool, attempt_id, now)
            pipeline.add(pool_lock, "pool lock")
            queued = pipeline.add(queue, "waiting TI queued")
        sent = committed_at_once(case.factory, pipeline)
        row: IndexRow | None = sent.first(result)
        if row is None:
            return None
        filled = [fill_message(r, attempt_id) for r in sent[queued]] if queued is not None else None
        return _Indexed(sent.first(lock), row, filled)

    indexed = retrying(write)
    if indexed is None:  # the compare-and-set lost
        return Recorded(False, None, Path.INDEX_AT_ONCE)
    last = is_last_index(case, indexed.run, indexed.row)
    if indexed.filled is not None:
        filled = indexed.filled
        then = Then.WAKE if last else Then.FILLED if filled else Then.NOTHING
        return Recorded(True, FollowUp(filled, wake=last), Path.INDEX_AT_ONCE, then)
    if last:
        return _recorded(Path.INDEX_AT_ONCE, case, Then.WAKE, lambda: FollowUp(wake=True))
    return _recorded(Path.INDEX_AT_ONCE, case, Then.FILL, lambda: _fill_with_spans(case))


def success_pipeline(case: Case, now: dt.datetime) -> tuple[Pipeline, Handle, Handle]:
    """The statements a result that queues what follows starts with: the run's lock (sent
    with the BEGIN), then the success's compare-and-set; the pipeline and their handles."""
    pipeline = Pipeline()
    lock = pipeline.add(run_lock(case.run_pk), "run lock")
    result = pipeline.add(
        success_write(ti_id=case.ti_id, attempt_id=case.attempt_id, now=now, values=case.values),
        "result",
    )
    return pipeline, lock, result


def index_result_pipeline(case: Case, now: dt.datetime) -> tuple[Pipeline, Handle, Handle]:
    """The statements an index's result starts with: the run's lock (sent with the BEGIN),
    then `index_write` (the result, whether another index is unfinished, whether TIs wait
    in its pool); the pipeline and the two statements' handles."""
    pipeline = Pipeline()
    lock = pipeline.add(run_lock(case.run_pk), "run lock")
    result = pipeline.add(
        index_write(
            run_pk=case.run_pk,
            task_id=case.task_id,
            pool=case.pool,
            ti_id=case.ti_id,
            attempt_id=case.attempt_id,
            now=now,
            values=case.values,
        ),
        "result",
    )
    return pipeline, lock, result


def is_last_index(case: Case, run: RunRow | None, row: IndexRow) -> bool:
    """Whether the index whose result `row` (`index_write`'s, under the run's lock `run`)
    was written leaves the schedulers to decide: no other index unfinished, or a run the
    workers do not drive (claimed, gone, of another DAG version)."""
    assert case.dag is not None
    return run is None or not drives(run, case.dag) or not row.unfinished


def _fill_with_spans(case: Case) -> FollowUp:
    """`_fill` in a transaction that also starts the span of the TI it queued."""
    with transaction(case.factory) as session:
        return fill_in(session, case, utcnow())


def fill_in(session: Session, case: Case, now: dt.datetime) -> FollowUp:
    """In the caller's transaction: the slot `case`'s result freed given to the first TI
    waiting in its pool, its span started when tracing; what to send."""
    messages = fill_freed_slot(session, pool=case.pool, now=now, with_trace=case.tracing)
    if case.tracing and messages:
        spans.start_ti_spans(session, [m.ti_id for m in messages], now)
    return FollowUp(messages)


def _left_waiting(scheduled: list[ScheduledRow], messages: list[RunMessage]) -> bool:
    """Whether a TI the query moved to `scheduled` (its rows) was not queued by the same
    query's fill (`messages`): it waits in its pool. The caller wakes the schedulers when
    no other run's TI waited before it (the rows' `backlog` false): then only a pass will
    place it."""
    return bool({row.id for row in scheduled} - {m.ti_id for m in messages})


def _recorded(path: Path, case: Case, then: Then, follow: Callable[[], FollowUp]) -> Recorded:
    """What follows a committed result; the schedulers' if it fails (a dropped
    connection: the result stays written, they decide on their next pass)."""
    try:
        return Recorded(True, follow(), path, then)
    except OperationalError as exc:
        log.warning(
            "deciding after the result of ti %s failed, the schedulers will: %s", case.ti_id, exc
        )
        return Recorded(True, FollowUp(wake=True), path, then, failed=True)


def _fill(case: Case) -> FollowUp:
    """The slot the result freed to the first TI waiting in its pool, in one query."""
    attempt_id = str(uuid.uuid4())
    pipeline = Pipeline()
    pool_lock, queue = fill_statements(case.pool, attempt_id, utcnow())
    pipeline.add(pool_lock, "pool lock")
    queued = pipeline.add(queue, "waiting TI queued")
    sent = committed_at_once(case.factory, pipeline)
    return FollowUp([fill_message(row, attempt_id) for row in sent[queued]])


def _queue_join(case: Case, plan: Plan, *, fill: bool) -> FollowUp:
    """After the last upstream's result: the fan-in queued in one query (the run's lock,
    its pool's lock, the queueing if every upstream succeeded and it fits; else, if it may
    run, moved to `scheduled` to wait in its pool; with `fill`, the slot the result freed
    given to the first TI waiting, which may be the fan-in). Queued or waiting, nothing
    more; a fan-in left waiting with no other run's TI waiting before it (no room, its
    DAG at max_active_tasks) wakes the schedulers. Neither (an upstream did not succeed):
    decided as `decided` decides (a wide fan-in's: by the schedulers)."""
    assert case.dag is not None
    attempt_id, fill_attempt = str(uuid.uuid4()), str(uuid.uuid4())
    now = utcnow()
    pipeline = Pipeline()
    pipeline.add(run_lock(case.run_pk), "run lock")
    run_pk, finished_id = case.run_pk, case.ti_id
    pool_lock, queue = join_next_statements(
        plan, case.dag, run_pk=run_pk, finished_id=finished_id, attempt_id=attempt_id, now=now
    )
    pipeline.add(pool_lock, "pool lock")
    queued = pipeline.add(queue, "fan-in queued")
    ready = join_ready_statement(plan, case.dag, run_pk=run_pk, finished_id=finished_id, now=now)
    waiting = pipeline.add(ready, "fan-in scheduled")
    filled = None
    if fill:
        filled = pipeline.add(fill_statement(case.pool, fill_attempt, now), "slot filled")
    sent = committed_at_once(case.factory, pipeline)
    messages = [fill_message(row, attempt_id) for row in sent[queued]]
    if filled is not None:
        messages += [fill_message(row, fill_attempt) for row in sent[filled]]
    if sent[queued]:
        return FollowUp(messages)
    scheduled: list[ScheduledRow] = sent[waiting]
    if scheduled:
        return FollowUp(
            messages, wake=_left_waiting(scheduled, messages) and not scheduled[0].backlog
        )
    if plan.wide:  # a failed upstream: the schedulers decide (they read the run)
        return FollowUp(messages, wake=True)
    follow = _decide_after(case, False)
    follow.messages[:0] = messages
    return follow


def _decide_after(case: Case, waiting: bool) -> FollowUp:
    """In a transaction of its own under the run's lock: the downstream of the result
    decided and queued (a fan-in after its last upstream, a chain link's next that could
    not be queued in its query; the stored result passes on: a branch's choice), or,
    while other upstreams are `waiting`, the slot it freed filled."""
    plan = case.plan if case.plan is not None and not case.plan.wide else None
    opener = Pipeline()
    lock = opener.add(run_lock(case.run_pk), "run lock")
    with transaction_opened_by(case.factory, opener) as (session, opened):
        now = utcnow()
        locked = locked_run(
            plan,  # None for a wide fan-in: the schedulers decide it
            opened.first(lock),
            run_pk=case.run_pk,
            task_id=case.task_id,
            pool=case.pool,
            dag=case.dag,
        )
        if locked is None:
            return FollowUp(wake=True)
        if waiting:
            locked = replace(locked, waiting=True, backlog=True)
        else:
            locked = read_run(session, locked)
        return schedule_downstream(
            session,
            locked,
            finished=TI.SUCCESS,
            result=case.values.get("result"),
            now=now,
            with_trace=case.tracing,
        )
