"""The result of one index of a mapped task whose downstream waits for every index
(`index_written`): the worker writes it and, while other indexes are unfinished, gives
the slot it freed to the first TI waiting in its pool; the last index wakes the
schedulers, which decide what follows (the reduce, a task expanded over the output).

Invariant: the run's row is locked first (`downstream_sql.run_lock`, sent with the
BEGIN), then the result is written and the task's other indexes are counted: the run's
lock serialises the indexes' results, so exactly one of them, the last, finds none
unfinished and wakes the schedulers. Without it two last indexes could each see the
other running and neither wake them (the schedulers' full pass would still find the
run, a loop interval later). What the fill queued is published after the commit.
"""

from __future__ import annotations

from sluice.broker.worker.result.at_once import fill_in, index_result_pipeline, is_last_index
from sluice.broker.worker.result.case import Case, Path, Recorded, store_asset_events
from sluice.broker.worker.retrying import retrying
from sluice.scheduler.core.db import transaction_opened_by, utcnow
from sluice.scheduler.core.queries.task_logs import save_task_log
from sluice.scheduler.decide.downstream import FollowUp
from sluice.scheduler.decide.downstream_sql import IndexRow, RunRow


def index_written(case: Case) -> Recorded:
    """The index's result written under the run's lock by the UPDATE that also says
    whether another index is unfinished and TIs wait in its pool (`index_write`, as
    `index_at_once` sends it); the freed slot filled while other indexes are unfinished,
    else the schedulers woken."""

    def write() -> FollowUp | None:
        """What follows the result, in its transaction; None if its compare-and-set lost."""
        now = utcnow()
        opener, lock, result = index_result_pipeline(case, now)
        with transaction_opened_by(case.factory, opener) as (session, opened):
            run: RunRow | None = opened.first(lock)
            row: IndexRow | None = opened.first(result)
            if case.task_log is not None:  # stored even when the result lost
                save_task_log(session, case.task_log, now=now)
            if row is None:  # the compare-and-set lost
                return None
            store_asset_events(session, case, now)
            if is_last_index(case, run, row):
                return FollowUp(wake=True)  # the last index: the schedulers decide
            return fill_in(session, case, now) if row.backlog else FollowUp()

    follow = retrying(write)
    return Recorded(follow is not None, follow, Path.INDEX_WRITTEN)
