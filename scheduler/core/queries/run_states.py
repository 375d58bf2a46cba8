"""What an `ExternalTaskSensor`'s poke reads (`tasks.external_sensor`): the state of a
DAG's run at a logical date, or the states of one task's TIs in that run.

One plain SELECT, no lock, no write: the run by its unique (dag_id, logical_date), its
TIs by the key (dag_run_id, task_id, map_index), joined. The worker gives a sensor this
read, never a session (`broker.worker.runner._sense`).
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import and_, select
from sqlalchemy.orm import Session

from sluice.scheduler.core.models import DagRun, TaskInstance


def run_states(
    session: Session, dag_id: str, logical_date: dt.datetime, task_id: str | None = None
) -> list[str] | None:
    """The state of `dag_id`'s run at `logical_date` (a list of one) or, with `task_id`,
    the states of that run's TIs of the task in map-index order ([] when the run has no
    such task); None when there is no such run."""
    if task_id is None:
        state = session.scalar(
            select(DagRun.state).where(DagRun.dag_id == dag_id, DagRun.logical_date == logical_date)
        )
        return None if state is None else [str(state)]
    rows = session.execute(
        select(DagRun.id, TaskInstance.state)
        .outerjoin(
            TaskInstance,
            and_(TaskInstance.dag_run_id == DagRun.id, TaskInstance.task_id == task_id),
        )
        .where(DagRun.dag_id == dag_id, DagRun.logical_date == logical_date)
        .order_by(TaskInstance.map_index)
    ).all()
    if not rows:
        return None
    return [str(state) for _, state in rows if state is not None]
