"""A run's `dagrun_timeout` and a try's `queued_timeout`, decided when a scheduler (or a
backfill) examines the run, under the run's row lock, in its scheduling transaction.

- `dagrun_timeout` counts from the run's start (`dag_run.start_date`, when it left
  `queued`): past it, the run ends as a cancel ends it (`cancelling.cancel_runs`), its
  tries' error naming the timeout; the caller stops those tries after its commit.
- `queued_timeout` (schedule-to-start, per task) counts from the try's queueing
  (`queued_at`; the queued sweep's re-publish stamps `published_at` and does not extend
  it): a try no worker claimed within it goes to `up_for_retry` or `failed` by its tries,
  guarded on its attempt, with the reason as its error; its message, if a worker takes it
  later, loses its claim.
Only DAGs that set them pay anything: one extra read of the queued TIs of such tasks.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from sluice.scheduler.core.models import DagRun, TaskInstance
from sluice.scheduler.core.states import TI
from sluice.scheduler.core.transitions import fail_try
from sluice.scheduler.decide.decisions import TiView
from sluice.tasks.serialize import retry_delay_for


def run_timeout_error(run: DagRun, spec: dict[str, Any], now: dt.datetime) -> str | None:
    """The error for the TIs of `run` if it is past its DAG's `dagrun_timeout`, else None."""
    timeout = spec.get("dagrun_timeout")
    if timeout is None or run.start_date is None:
        return None
    if now - run.start_date <= dt.timedelta(seconds=float(timeout)):
        return None
    return f"the run timed out: still unfinished {float(timeout):g}s after it started"


def fail_queued_past_timeout(
    session: Session, spec: dict[str, Any], tis: list[TiView], now: dt.datetime
) -> tuple[list[TiView], list[str]]:
    """Fail or retry the queued tries of `tis` past their task's `queued_timeout`; the
    views with their new states, and the attempts to revoke after the commit."""
    limits = {
        task_id: float(task["queued_timeout"])
        for task_id, task in spec["tasks"].items()
        if task.get("queued_timeout") is not None
    }
    waiting = [t.id for t in tis if t.state is TI.QUEUED and t.task_id in limits]
    if not waiting:
        return tis, []
    moved: dict[int, TiView] = {}
    attempts: list[str] = []
    for ti in session.scalars(select(TaskInstance).where(TaskInstance.id.in_(waiting))):
        limit = limits[ti.task_id]
        if ti.queued_at is None or now - ti.queued_at <= dt.timedelta(seconds=limit):
            continue
        error = f"no worker started the try within {limit:g}s of its queueing (queued_timeout)"
        new = fail_try(session, ti, spec["tasks"][ti.task_id], now, error, expect=TI.QUEUED)
        if new is None:
            continue
        next_retry = None
        if new is TI.UP_FOR_RETRY:
            next_retry = now + retry_delay_for(spec["tasks"][ti.task_id], ti.try_number)
        moved[ti.id] = TiView(
            ti.id, ti.task_id, new, next_retry_at=next_retry, map_index=ti.map_index
        )
        if ti.attempt_id:
            attempts.append(ti.attempt_id)
    return [moved.get(t.id, t) for t in tis], attempts
