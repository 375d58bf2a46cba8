"""Runs just started, decided from their DAG alone: their roots scheduled in one UPDATE.

A run whose every TI is still `none` is decided the same way each time: `decide_run` over
all-`none` TIs schedules the DAG's roots and moves nothing else (unless a root is
mapped, has a cap or cannot run: then there is no shortcut). So the runs a scheduler pass
started are not read one by one: `fresh_roots` works that decision out once per DAG
version, and `schedule_fresh` writes it for every started run of the version in one
UPDATE, which moves a run's roots only while none of the run's TIs has left `none`
(a cleared run that was queued again is decided by `update_state`, as is any run the
UPDATE did not move), then stamps the runs' `last_scheduling_decision` in one more.

Invariant: called in the scheduling pass's transaction, with the runs' rows locked by
the pass's claim (`claim_runs_to_examine`), as `update_state` is.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import BindParameter, Executable, and_, bindparam, select, update
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from sluice.scheduler.core.db import Sent, executed
from sluice.scheduler.core.hot_sql import hot
from sluice.scheduler.core.models import Dag, DagRun, TaskInstance
from sluice.scheduler.core.named_sql import hot_statement
from sluice.scheduler.core.queries.sql import one_of
from sluice.scheduler.core.states import TI
from sluice.scheduler.core.transitions import schedule_where_statement
from sluice.scheduler.decide.decisions import TiView
from sluice.scheduler.decide.per_version import PerVersion
from sluice.scheduler.scheduling.run_decision import decide_run

_TI = TaskInstance.__table__
_RUN = DagRun.__table__
_OTHER = TaskInstance.__table__.alias("other")

_RUNS: BindParameter[Any] = bindparam("runs", expanding=True)
_LEFT_NONE = (
    select(_OTHER.c.dag_run_id)
    .where(
        _OTHER.c.dag_run_id.in_(_RUNS),
        one_of(_OTHER.c.state, [state.value for state in TI if state is not TI.NONE]),
    )
    .scalar_subquery()
)
_FRESH_ROOTS = hot(
    "fresh runs' roots (SQLite)",
    and_(
        _TI.c.dag_run_id.in_(_RUNS),
        _TI.c.task_id.in_(bindparam("roots", expanding=True)),
        _TI.c.dag_run_id.not_in(_LEFT_NONE),
    ),
    twin=True,
)
_OF_RUN = hot("the moved TI's run (SQLite)", (_TI.c.dag_run_id.label("dag_run_id"),), twin=True)


def _roots_on_sqlite(values: Mapping[str, Any]) -> tuple[Executable, Mapping[str, Any]]:
    """`schedule_fresh_roots`'s SQLite twin."""
    params = {"runs": values["runs"], "roots": values["roots"]}
    return schedule_where_statement(
        now=values["now"], condition=_FRESH_ROOTS, params=params, returning=_OF_RUN
    )


SCHEDULE_FRESH_ROOTS = hot_statement("schedule_fresh_roots", _roots_on_sqlite)
"""scheduler/core/sql/scheduling.sql: the roots of fresh runs scheduled in one write."""
_STAMP = (
    update(_RUN)  # type: ignore[arg-type]
    .where(_RUN.c.id.in_(bindparam("runs", expanding=True)))
    .values(last_scheduling_decision=bindparam("b_now", type_=_RUN.c.last_scheduling_decision.type))
)

_ROOTS: PerVersion[str, tuple[str, ...] | None] = PerVersion(1024)


def fresh_roots(dag: Dag) -> tuple[str, ...] | None:
    """The tasks `decide_run` schedules in a run of `dag` whose TIs are all `none`, if
    that is all it does (no expansion, no other move, at least one); else None. Worked
    out once per DAG version."""
    return _ROOTS.get(dag.version_hash, lambda: _decided_roots(dag))


def _decided_roots(dag: Dag) -> tuple[str, ...] | None:
    tasks = list(dag.serialized.get("tasks") or ())
    views = [TiView(id=i, task_id=task_id, state=TI.NONE) for i, task_id in enumerate(tasks)]
    decisions = decide_run(dag.serialized, dag.version_hash, views, dt.datetime.now(dt.UTC))
    scheduled = decisions.moves.get(TI.SCHEDULED, [])
    if decisions.expansions or decisions.retries or set(decisions.moves) - {TI.SCHEDULED}:
        return None
    return tuple(sorted(tasks[i] for i in scheduled)) or None


def schedule_fresh(
    session: Session, runs: Sequence[DagRun], roots: Sequence[str], now: dt.datetime
) -> dict[int, int]:
    """Schedule `roots` in each of `runs` (of one DAG version) whose TIs are all `none`,
    and stamp those runs' decision; run id → TIs scheduled, for the runs decided so."""
    rows = executed(session, roots_statement([run.id for run in runs], roots, now))
    decided: dict[int, int] = {}
    for _, run_pk in rows:
        decided[run_pk] = decided.get(run_pk, 0) + 1
    if decided:
        session.execute(_STAMP, {"runs": sorted(decided), "b_now": now})
        for run in runs:
            if run.id in decided:  # written above; not dirty
                set_committed_value(run, "last_scheduling_decision", now)
    return decided


def roots_statement(run_pks: Sequence[int], roots: Sequence[str], now: dt.datetime) -> Sent:
    """The UPDATE of `schedule_fresh`: `roots` of the runs `run_pks` whose TIs are all
    `none` moved to `scheduled`, returning each moved TI's id and run."""
    return SCHEDULE_FRESH_ROOTS, {"runs": list(run_pks), "roots": list(roots), "now": now}
