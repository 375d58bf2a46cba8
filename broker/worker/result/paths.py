"""The ways a finished try's result is recorded, in one ordered table: the first path
whose condition holds records it (`record_result`).

Each path states once its condition, its round trips to the database, the locks it
takes (always in the order run, then TIs, then pools) and what happens when it cannot
finish the job. The table is the contract; `docs/architecture.md` shows it too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sluice.broker.worker.result.at_once import (
    chain_at_once,
    fan_in_at_once,
    fan_out_at_once,
    index_at_once,
    leaf_at_once,
)
from sluice.broker.worker.result.case import Case, Recorded
from sluice.broker.worker.result.in_transaction import decided, written
from sluice.broker.worker.result.mapped_index import index_written
from sluice.scheduler.core.states import TI


@dataclass(frozen=True)
class ResultPath:
    """One way of recording a result; `applies` is its condition, `record` does it."""

    name: str
    condition: str
    round_trips: str
    locks: str
    fallback: str
    applies: Callable[[Case], bool]
    record: Callable[[Case], Recorded]


PATHS: tuple[ResultPath, ...] = (
    ResultPath(
        name="fan_in_at_once",
        condition="a success with no log to store into a fan-in that waits for all its "
        "upstreams (any width), the worker deciding the downstream",
        round_trips="1: BEGIN, the run's lock, the UPDATE that writes the result and counts "
        "the other upstreams unfinished, COMMIT; then 0 or 1 more (module at_once)",
        locks="the run's row while the query runs; the freed pool's row if TIs wait in it",
        fallback="what follows runs in a query or a transaction of its own after the commit; "
        "if it fails, the schedulers are woken (the result stays written)",
        applies=lambda c: c.decides and c.quiet_success and c.fan_in_plan is not None,
        record=fan_in_at_once,
    ),
    ResultPath(
        name="chain_at_once",
        condition="a success with no log to store of a chain's link (one downstream, whose "
        "only upstream it is, in its pool, ready on a success), no spans to start",
        round_trips="1: BEGIN, the run's lock, the result, the pool's lock, the next TI "
        "queued if nobody waits in its pool and it fits, COMMIT",
        locks="the run's row, then the pool's row, while the query runs",
        fallback="next TI not queued: decided in a transaction of its own under the run's "
        "lock; the run not the worker's to drive: the schedulers are woken",
        applies=lambda c: (
            c.decides
            and c.quiet_success
            and c.plan is not None
            and c.plan.chain_next is not None
            and not c.tracing
        ),
        record=chain_at_once,
    ),
    ResultPath(
        name="fan_out_at_once",
        condition="a success with no log to store of a task whose several downstream (fewer "
        "than FILL_LIMIT) it is the only upstream of, in its pool, ready on a success, no "
        "spans to start",
        round_trips="1: BEGIN, the run's lock, the result, the pool's lock, the ready "
        "downstream that fit queued by priority when nobody waits in the pool (the pool's "
        "and the DAG's room counted once), the others scheduled, the slot the result freed "
        "given to the first TI waiting, COMMIT",
        locks="the run's row, then the pool's row, while the query runs",
        fallback="the run not the worker's to drive, a downstream neither queued nor "
        "scheduled, or one left waiting with no other run's TI before it: the schedulers "
        "are woken",
        applies=lambda c: (
            c.decides
            and c.quiet_success
            and c.plan is not None
            and c.plan.fan_out is not None
            and not c.tracing
        ),
        record=fan_out_at_once,
    ),
    ResultPath(
        name="leaf_at_once",
        condition="a success with no log to store of a task with no downstream, the worker "
        "deciding (a run's last task, a branch's end)",
        round_trips="1: BEGIN, the run's lock, the UPDATE that writes the result and says "
        "whether another TI of the run is unfinished and whether TIs wait in its pool (with "
        "the pool's lock and the first TI waiting queued, when the process's last such "
        "result found a backlog in that pool), COMMIT; then 0 or 1 more (the fill)",
        locks="the run's row while the query runs; the freed pool's row if TIs wait in it",
        fallback="the run's last unfinished TI, or a run the worker may not drive: the "
        "schedulers are woken (they end the run); a fill that fails wakes them too",
        applies=lambda c: (
            c.decides and c.quiet_success and c.plan is not None and not c.plan.downstream
        ),
        record=leaf_at_once,
    ),
    ResultPath(
        name="decided",
        condition="the worker decides the downstream and the run is small enough to read "
        "(at most READ_LIMIT TIs to read)",
        round_trips="2 to 4: BEGIN with the run's lock (and a fan-in's counting UPDATE), "
        "the log, the result with its read, the queueing, COMMIT",
        locks="the run's row first, then the TIs it writes, then the pools it queues into",
        fallback="the run claimed by a job, of another DAG version or waiting for a "
        "scheduler to continue its spans: the result written, the schedulers woken",
        applies=lambda c: c.decides and c.plan is not None,
        record=decided,
    ),
    ResultPath(
        name="index_at_once",
        condition="a success with no log to store of one index of a mapped task whose "
        "downstream waits for every index (none follows it one to one)",
        round_trips="1: BEGIN, the run's lock, the UPDATE that writes the result and says "
        "whether another index is unfinished, the pool's lock, the first TI waiting in it "
        "queued if it fits, COMMIT; with spans to start, the fill is 1 transaction more",
        locks="the run's row, then the freed pool's row, while the query runs",
        fallback="the last index, or a run the worker may not drive: the schedulers are "
        "woken and decide what follows",
        applies=lambda c: c.decides and c.quiet_success and c.every_index,
        record=index_at_once,
    ),
    ResultPath(
        name="index_written",
        condition="a success with a log to store of one index of a mapped task whose "
        "downstream waits for every index",
        round_trips="2 or 3: BEGIN with the run's lock and the result's UPDATE that says "
        "whether another index is unfinished and TIs wait in its pool, the log, the freed "
        "slot filled if they do, COMMIT",
        locks="the run's row first, then the TI, then the freed pool's row",
        fallback="the last index, or a run the worker may not drive: the schedulers are "
        "woken and decide what follows",
        applies=lambda c: c.decides and c.new is TI.SUCCESS and c.every_index,
        record=index_written,
    ),
    ResultPath(
        name="written",
        condition="anything else: a failure or a retry, downstream decisions off, a run "
        "too wide to read (but a quiet fan-in success), a task not run from the stored DAG",
        round_trips="1 or 2: the result's compare-and-set (and the log) in one transaction",
        locks="the TI's row",
        fallback="none needed: the schedulers are woken and decide what follows",
        applies=lambda c: True,
        record=written,
    ),
)


def record_result(case: Case) -> Recorded:
    """Record `case` by the first path of `PATHS` whose condition holds."""
    path = next(p for p in PATHS if p.applies(case))
    return path.record(case)
