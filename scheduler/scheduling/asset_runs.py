"""Runs made by asset events: a DAG scheduled on assets gets a run once its condition
holds over the assets with an event queued for it (`queries.assets`).

Invariant: called in the scheduling pass's transaction. Each DAG's row is locked
`SKIP LOCKED` before its queue is read, and the run's INSERT and the DELETE of the queue
rows it consumed commit together: whatever the number of schedulers, each event
triggers each consuming DAG at most once.
"""

from __future__ import annotations

import datetime as dt
import logging

from sqlalchemy.orm import Session

from sluice.scheduler.core.queries.assets import (
    as_context,
    consume,
    dags_with_queued_events,
    queued_events,
)
from sluice.scheduler.core.queries.runs import lock_dags
from sluice.scheduler.core.states import RunType
from sluice.scheduler.scheduling.dagrun import RunExists, create_dagrun, run_id_for
from sluice.tasks.assets import holds

log = logging.getLogger(__name__)


def create_asset_runs(session: Session, now: dt.datetime) -> int:
    """Create a run of each unpaused DAG whose asset condition holds over its queued
    events, consuming them; how many runs."""
    dag_ids = dags_with_queued_events(session)
    created = 0
    for dag in lock_dags(session, dag_ids):
        schedule = dag.serialized.get("schedule")
        if not isinstance(schedule, dict) or "assets" not in schedule:
            continue
        events = queued_events(session, dag.dag_id)
        if not events or not holds(schedule["assets"], {e.uri for e in events}):
            continue
        logical = now
        try:  # a clash writes nothing and leaves the transaction usable
            run = create_dagrun(
                session,
                dag,
                run_type=RunType.ASSET_TRIGGERED,
                logical_date=logical,
                now=now,
                run_id=run_id_for(RunType.ASSET_TRIGGERED, logical),
                triggering_events=[as_context(e) for e in events],
            )
        except RunExists:
            log.info("%s already has a run at %s: its events wait", dag.dag_id, logical)
            continue
        consume(session, dag.dag_id, [e.id for e in events])
        created += 1
        log.info("%s: run %s triggered by %d asset event(s)", dag.dag_id, run.run_id, len(events))
    return created
