"""Runs made by a watch's evaluation: one per run key never seen before (`watch_key`),
its run id `watch__<key>` (`tasks.watch.run_id_of`), its conf the request's. A request
whose conf the DAG's params refuse makes no run and records no key: the first such
refusal is the watch's error (`run key 'k': param 'n': ...`), its other requests make
their runs and the cursor moves on.

Invariant: `record_evaluation` runs in one transaction, under the watch's row lock and
only while the recorder holds the watch's lease: the keys, the runs, the cursor and the
error commit together, and a key's row is inserted `ON CONFLICT DO NOTHING` before its
run is made, so a key makes at most one run, ever, whatever the triggerers and restarts.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass

from sqlalchemy.orm import Session

from sluice.scheduler.core.models import Dag, WatchKey
from sluice.scheduler.core.queries.watches import locked_if_mine
from sluice.scheduler.core.states import RunType
from sluice.scheduler.core.upsert import insert_unless_clash
from sluice.scheduler.scheduling.dagrun import RunExists, create_dagrun
from sluice.tasks.params import ParamsError, resolve_params
from sluice.tasks.watch import run_id_of
from sluice.tasks.watching import Evaluation

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Recorded:
    """What recording an evaluation did: the runs made (None: the lease was lost)."""

    runs: list[str] | None


def record_evaluation(
    session: Session, dag: Dag, owner: int, evaluation: Evaluation, now: dt.datetime
) -> Recorded:
    """Record `evaluation` of `dag`'s watch by `owner`: the runs of its new keys, its
    cursor (kept as it was on an error), its error, and when it is due again."""
    watch = locked_if_mine(session, dag.dag_id, owner)
    if watch is None:
        return Recorded(None)
    interval = float((dag.serialized.get("schedule") or {}).get("watch", {}).get("interval", 30))
    made: list[str] = []
    refused: list[str] = []
    if evaluation.error is None:
        for i, request in enumerate(evaluation.requests):
            try:  # before its key is recorded: a fixed conf may make its run later
                resolve_params(dag.serialized.get("params"), request.conf)
            except ParamsError as exc:
                refused.append(f"run key {request.run_key!r}: {exc}")
                continue
            run_id = run_id_of(request.run_key)
            key = {
                "dag_id": dag.dag_id,
                "run_key": request.run_key,
                "run_id": run_id,
                "created_at": now,
            }
            if insert_unless_clash(session, WatchKey, key) is None:
                continue  # seen before: its run was made then
            try:
                create_dagrun(
                    session,
                    dag,
                    run_type=RunType.WATCH,
                    logical_date=now + dt.timedelta(microseconds=i),
                    now=now,
                    run_id=run_id,
                    conf=request.conf,
                )
                made.append(run_id)
            except RunExists:
                log.warning(
                    "%s already has a run %s: key %r makes none",
                    dag.dag_id,
                    run_id,
                    request.run_key,
                )
        watch.cursor = evaluation.cursor
        watch.last_error = refused[0] if refused else None
        watch.error_at = now if refused else None
    else:
        watch.last_error = evaluation.error
        watch.error_at = now
    watch.last_eval_at = now
    watch.evaluations = (watch.evaluations or 0) + 1
    watch.next_eval_at = now + dt.timedelta(seconds=interval)
    watch.lease_owner = None
    watch.lease_until = None
    return Recorded(made)
