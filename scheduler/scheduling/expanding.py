"""Writing a mapped task's expansion (`decisions.Expansion`) in the run's transaction.

Called by `dagrun.update_state` with the run's row locked, so two schedulers, a backfill
or a redelivered wake-up never expand one task twice: the second reads the indexes the
first wrote. The placeholder TI (map index -1) becomes the first index; the others are
inserted in one bulk INSERT, those to start at once already `scheduled`
(`ti_rows.insert_indexes`); indexes no longer wanted that are still `none` become
`removed` (a rerun with fewer items) and removed ones wanted again `none`. Nothing is
committed here.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import update
from sqlalchemy.orm import Session

from sluice.scheduler.core.models import Dag, DagRun, TaskInstance
from sluice.scheduler.core.states import TI
from sluice.scheduler.core.transitions import move_tis
from sluice.scheduler.decide.decisions import Expansion
from sluice.scheduler.scheduling.ti_rows import insert_indexes


def write_expansion(
    session: Session, run: DagRun, dag: Dag, expansion: Expansion, now: dt.datetime
) -> list[int]:
    """Bring the task's TIs to `expansion.indexes`; the ids of the TIs scheduled."""
    by_index = {ti.map_index: ti for ti in expansion.tis}
    wanted = set(expansion.indexes)
    ids = {i: ti.id for i, ti in by_index.items()}
    placeholder = by_index.pop(-1, None)
    free = sorted(wanted - set(by_index))
    if placeholder is not None and placeholder.state is TI.NONE:
        if free:
            session.execute(
                update(TaskInstance)
                .where(TaskInstance.id == placeholder.id, TaskInstance.map_index == -1)
                .values(map_index=free[0])
                .execution_options(synchronize_session=False)
            )
            by_index[free[0]] = placeholder
            ids[free[0]] = placeholder.id
        else:
            by_index[-1] = placeholder  # no index left for it: removed below
    missing = sorted(wanted - set(by_index))
    schedule = frozenset(expansion.schedule)
    new = insert_indexes(session, run, dag, expansion.task_id, missing, scheduled=schedule, now=now)
    back = [ti.id for i, ti in by_index.items() if i in wanted and ti.state is TI.REMOVED]
    move_tis(session, back, TI.NONE, expect=[TI.REMOVED], now=now)
    gone = [ti.id for i, ti in by_index.items() if i not in wanted and ti.state is TI.NONE]
    move_tis(session, gone, TI.REMOVED, expect=[TI.NONE], now=now)
    kept = [ti_id for i, ti_id in ids.items() if i in schedule]  # existing TIs to start
    started = move_tis(session, kept, TI.SCHEDULED, expect=[TI.NONE], now=now)
    return started + [ti_id for i, ti_id in new.items() if i in schedule]
