"""Runs of other DAGs created for deferred TIs: a TI deferred on `triggers.CreateRun(dag_id,
run_id, conf, logical_date)` (what `TriggerDagRun` defers on) is resumed with `{"dag_id",
"run_id"}` once that run exists, a manual run created here with `dagrun.create_dagrun`.

No triggerer leases nor runs these triggers: at each tick a triggerer takes the waiting
ones `FOR UPDATE SKIP LOCKED` (triggerers share them, and two never create one run for one
trigger), in one transaction with the runs it creates, so a run is never created without
its TI's resume nor the other way round:

- a run of that id that exists already counts as created (a retry of the TI that asked
  for it, whose run id is derived from the TI, creates no second run);
- else the run is created (queued; the schedulers start it within its DAG's
  `max_active_runs`, and a paused DAG's run waits for its DAG to be unpaused), at the
  trigger's logical date or now, with its conf, checked against the deployment's bounds;
- then the TI is resumed: one compare-and-set on the trigger's attempt
  (`queries.triggers.resume`).

A DAG that does not exist or is no longer in its folder, a conf over the bounds or one
its params refuse (`tasks.params`), a run id the scheduler refuses, or another run of the
DAG at that logical date are refusals: the caller fails those TIs with the line
(`queries.triggers.fail_deferred`, retries apply), each in a transaction of its own, and
nothing else is written for them. A TI that moved
meanwhile (cleared, marked) gets no run: its trigger row is left to `drop_orphans`.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session

from sluice.scheduler.core.models import Dag, DagRun, TaskInstance, Trigger
from sluice.scheduler.core.queries.triggers import resume
from sluice.scheduler.core.states import TI, RunType
from sluice.scheduler.scheduling.dagrun import RunExists, check_run_id, create_dagrun
from sluice.tasks.conf_bounds import conf_problem
from sluice.tasks.params import ParamsError
from sluice.tasks.triggers import CREATE_RUN_CLASSPATH


@dataclass
class TriggeredRuns:
    """What one call did: the TIs resumed, the runs created (their ids), and the
    triggers refused with why (expunged from the session, for `fail_deferred`)."""

    resumed: list[int] = field(default_factory=list)
    created: list[int] = field(default_factory=list)
    refused: list[tuple[Trigger, str]] = field(default_factory=list)


def create_awaited_runs(
    session: Session,
    now: dt.datetime,
    *,
    max_conf_bytes: int,
    max_conf_depth: int,
    limit: int = 100,
) -> TriggeredRuns:
    """Create the runs that TIs deferred on `CreateRun` wait for and resume those TIs
    (at most `limit`, taken `SKIP LOCKED`); the caller commits, then fails the refused."""
    done = TriggeredRuns()
    rows = session.scalars(
        select(Trigger)
        .where(Trigger.classpath == CREATE_RUN_CLASSPATH)
        .order_by(Trigger.id)
        .limit(limit)
        .with_for_update(skip_locked=True)
    ).all()
    for row in rows:
        why = _create(session, row, now, max_conf_bytes, max_conf_depth, done)
        if why is not None:
            session.expunge(row)
            done.refused.append((row, why))
    return done


def _create(
    session: Session,
    row: Trigger,
    now: dt.datetime,
    max_conf_bytes: int,
    max_conf_depth: int,
    done: TriggeredRuns,
) -> str | None:
    """Create (or find) the run `row` asks for and resume its TI; why not, if refused."""
    kwargs = row.kwargs if isinstance(row.kwargs, dict) else {}
    dag_id, run_id = str(kwargs.get("dag_id")), kwargs.get("run_id")
    conf = kwargs.get("conf") or {}
    try:
        check_run_id(run_id if isinstance(run_id, str) else "")
    except ValueError as exc:
        return f"cannot trigger a run of DAG {dag_id!r}: its run id {exc}"
    assert isinstance(run_id, str)
    dag = session.get(Dag, dag_id)
    if dag is None or not dag.serialized:
        return f"cannot trigger a run of DAG {dag_id!r}: no such DAG"
    if not dag.is_active:
        return f"cannot trigger a run of DAG {dag_id!r}: it is no longer in its DAGs folder"
    problem = conf_problem(conf, max_conf_bytes, max_conf_depth)
    if problem is not None:
        return (
            f"cannot trigger a run of DAG {dag_id!r}: {problem} "
            "(SLUICE_MAX_CONF_BYTES, SLUICE_MAX_CONF_DEPTH)"
        )
    existing = _run_pk(session, dag_id, run_id)
    if existing is None:
        if not _still_deferred(session, row):
            return None  # moved meanwhile: no run for it (drop_orphans takes the row)
        text = kwargs.get("logical_date")
        try:
            at = dt.datetime.fromisoformat(text) if isinstance(text, str) else now
        except ValueError:
            return f"cannot trigger a run of DAG {dag_id!r}: bad logical date {text!r}"
        try:
            run = create_dagrun(
                session,
                dag,
                run_type=RunType.MANUAL,
                logical_date=at,
                now=now,
                run_id=run_id,
                conf=conf,
            )
        except ParamsError as exc:  # raised before anything was written
            return f"cannot trigger a run of DAG {dag_id!r}: {exc}"
        except RunExists:  # another run at that date, or this id created meanwhile
            existing = _run_pk(session, dag_id, run_id)
            if existing is None:
                return (
                    f"cannot trigger run {run_id!r} of DAG {dag_id!r}: the DAG has another "
                    f"run at {at.isoformat()}"
                )
        else:
            done.created.append(run.id)
    if resume(session, row, {"dag_id": dag_id, "run_id": run_id}, now):
        done.resumed.append(row.ti_id)
    return None


def _run_pk(session: Session, dag_id: str, run_id: str) -> int | None:
    return session.scalar(select(DagRun.id).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))


def _still_deferred(session: Session, row: Trigger) -> bool:
    """Whether the trigger's TI still waits on it (deferred, on its attempt); its row is
    then locked until the commit, so the resume that follows the run's creation wins (a
    clear or a mark waits for this transaction, and finds the TI resumed)."""
    found = session.scalar(
        select(TaskInstance.id)
        .where(
            TaskInstance.id == row.ti_id,
            TaskInstance.state == TI.DEFERRED,
            TaskInstance.attempt_id == row.attempt_id,
        )
        .with_for_update()
    )
    return found is not None
