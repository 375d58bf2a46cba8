"""TIs deferred on `RunFinished(dag_id, run_id, states)`: resumed when that run ends in
one of `states`, failed when it ends in another. No triggerer leases nor runs these
triggers: at each tick a triggerer resolves every one whose run has ended, in one query
(`SKIP LOCKED`: triggerers share them). Each resume or failure is one compare-and-set on
the TI (`queries.triggers`)."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import and_, select
from sqlalchemy.orm import Session

from sluice.scheduler.core.models import DagRun, Trigger
from sluice.scheduler.core.queries.triggers import resume
from sluice.scheduler.core.states import RUN_TERMINAL
from sluice.tasks.triggers import RUN_FINISHED_CLASSPATH


def ended_runs_waited_on(
    session: Session, now: dt.datetime, limit: int = 500
) -> tuple[list[int], list[tuple[Trigger, str]]]:
    """Resume the TIs whose awaited run ended in a state they wait for; the TIs moved,
    and (trigger, why) for those whose run ended otherwise (the caller fails them, with
    their retries: `fail_deferred`), expunged from the session."""
    rows = session.execute(
        select(Trigger, DagRun.state)
        .join(
            DagRun,
            and_(
                DagRun.dag_id == Trigger.kwargs["dag_id"].as_string(),
                DagRun.run_id == Trigger.kwargs["run_id"].as_string(),
            ),
        )
        .where(
            Trigger.classpath == RUN_FINISHED_CLASSPATH,
            DagRun.state.in_([str(s) for s in RUN_TERMINAL]),
        )
        .order_by(Trigger.id)
        .limit(limit)
        .with_for_update(of=Trigger, skip_locked=True)
    ).all()
    resumed: list[int] = []
    otherwise: list[tuple[Trigger, str]] = []
    for row, state in rows:
        wanted = [str(s) for s in row.kwargs.get("states") or ["success"]]
        if str(state) in wanted:
            payload = {"dag_id": row.kwargs["dag_id"], "run_id": row.kwargs["run_id"]}
            if resume(session, row, {**payload, "state": str(state)}, now):
                resumed.append(row.ti_id)
        else:
            session.expunge(row)
            why = (
                f"the awaited run {row.kwargs['dag_id']}.{row.kwargs['run_id']} ended "
                f"{state}, not {' or '.join(wanted)}"
            )
            otherwise.append((row, why))
    return resumed, otherwise
