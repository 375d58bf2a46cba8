"""`/api/v1/dags/{dag_id}/runs`: listing, triggering and reading DAG runs.

Triggering goes through `scheduler.control.operations.trigger_run`, as `sluice dags
trigger` does, and wakes the schedulers the same way; its conf and run id are checked
by `scheduler.control.inputs`, as the CLI checks them, before anything is written. A
trigger with a `version` takes the git bundle's DAG at that commit, tag or branch
(`scheduling.bundle_sync.dag_at_version`, as `--version` does).

A run's answer carries its commit (`bundle_version`) and the version it follows
(`version`), read with the runs (`version_reads.version_refs`, one query a page).
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated

from fastapi import APIRouter, BackgroundTasks, Query
from sqlalchemy import func, select
from sqlalchemy.orm import Session, defer

from sluice.scheduler.api.deps import Caller, CanRead, CanWrite, DbSession, State
from sluice.scheduler.api.errors import ApiError, unprocessable
from sluice.scheduler.api.lookups import find_dag, find_run
from sluice.scheduler.api.paging import MAX_OFFSET, Limit, Offset
from sluice.scheduler.api.responses import errors
from sluice.scheduler.api.routes_tasks import apply_mark
from sluice.scheduler.api.schemas import (
    MarkOut,
    NoteIn,
    NoteOut,
    RunCreate,
    RunList,
    RunMarkIn,
    RunOut,
    RunTries,
)
from sluice.scheduler.api.tries import run_tries
from sluice.scheduler.api.views import note_from, note_out, run_out, run_summary
from sluice.scheduler.control import operations
from sluice.scheduler.control.inputs import InputError, check_conf, parse_date
from sluice.scheduler.control.operations import wake_schedulers
from sluice.scheduler.core.db import utcnow
from sluice.scheduler.core.models import DagRun
from sluice.scheduler.core.queries.version_reads import VersionRef, version_refs
from sluice.scheduler.core.states import DagRunState
from sluice.scheduler.scheduling.bundle_sync import UnknownVersion, dag_at_version
from sluice.scheduler.scheduling.dagrun import RunExists

router = APIRouter(prefix="/api/v1/dags/{dag_id}/runs", tags=["runs"])


def parse_logical_date(text: str) -> dt.datetime:
    """An ISO 8601 date or datetime (naive: UTC), or a 422 saying what is wrong."""
    try:
        return parse_date(text, "logical_date")
    except InputError as exc:
        raise unprocessable(str(exc)) from None


def version_of(session: Session, run: DagRun) -> VersionRef | None:
    """The version the run follows (its commit and subject), if it has one."""
    if run.dag_version_id is None:
        return None
    return version_refs(session, [run.dag_version_id]).get(run.dag_version_id)


@router.get("", response_model=RunList, dependencies=[CanRead], responses=errors(404))
def list_runs(
    dag_id: str,
    session: DbSession,
    state: State,
    run_state: Annotated[DagRunState | None, Query(alias="state")] = None,
    limit: Limit = 25,
    offset: Offset = 0,
) -> RunList:
    """The DAG's runs, newest logical date first, optionally only those in `state`
    (without their conf: `GET …/runs/{run_id}` has it)."""
    dag = find_dag(session, dag_id)
    where = [DagRun.dag_id == dag.dag_id]
    if run_state is not None:
        where.append(DagRun.state == run_state)
    total = session.scalar(select(func.count()).select_from(DagRun).where(*where)) or 0
    runs = session.scalars(
        select(DagRun)
        .options(defer(DagRun.conf, raiseload=True))
        .where(*where)
        .order_by(DagRun.logical_date.desc(), DagRun.id.desc())
        .limit(limit)
        .offset(offset)
    ).all()
    versions = version_refs(session, {r.dag_version_id for r in runs if r.dag_version_id})
    # one query for the page's versions; a run without one (-1) finds none
    return RunList(
        runs=[run_summary(r, state.config, versions.get(r.dag_version_id or -1)) for r in runs],
        total=total,
        limit=limit,
        offset=offset,
    )


@router.post(
    "",
    response_model=RunOut,
    status_code=201,
    dependencies=[CanWrite],
    responses=errors(404, 409),
)
def trigger_run(
    dag_id: str, body: RunCreate, session: DbSession, state: State, after: BackgroundTasks
) -> RunOut:
    """Create a manual run (queued) and wake the schedulers. With `version`, the run takes
    that version of a git bundle's DAG (422 if it has none: a folder's DAG, a commit, tag
    or branch the bundle does not have, a commit without the DAG). A conf that the DAG's
    params refuse (a value that does not fit, a required param missing) is a 422 whose
    detail names the param and the rule; no run is made."""
    try:
        conf = check_conf(
            body.conf or {},
            max_bytes=state.settings.max_conf_bytes,
            max_depth=state.settings.max_conf_depth,
        )
    except InputError as exc:
        raise unprocessable(str(exc)) from None
    dag = find_dag(session, dag_id, definition=True)  # the run's TIs are made from it
    now = utcnow()
    logical = parse_logical_date(body.logical_date) if body.logical_date is not None else now
    if body.version is not None:
        try:  # git, and a parse of the commit if it has no version recorded yet
            dag = dag_at_version(state.factory, state.settings, dag, body.version, now=now)
        except UnknownVersion as exc:
            raise unprocessable(str(exc)) from None
    try:
        run = operations.trigger_run(
            session, dag, now=now, logical_date=logical, run_id=body.run_id, conf=conf
        )
    except RunExists as exc:
        raise ApiError(409, str(exc)) from None
    except InputError as exc:  # a conf its params refuse: nothing was written
        raise unprocessable(str(exc)) from None
    after.add_task(wake_schedulers, state.settings)
    return run_out(run, state.config, version=version_of(session, run))


@router.get("/{run_id}", response_model=RunOut, dependencies=[CanRead], responses=errors(404))
def get_run(dag_id: str, run_id: str, session: DbSession, state: State) -> RunOut:
    _, run = find_run(session, dag_id, run_id)
    note = note_out(session, run.dag_id, run.run_id, None)
    return run_out(run, state.config, note, version_of(session, run))


TRIES_LIMIT = 1000
"""Most task instances on one page of `GET …/runs/{run_id}/tries`."""


@router.get(
    "/{run_id}/tries", response_model=RunTries, dependencies=[CanRead], responses=errors(404)
)
def get_run_tries(
    dag_id: str,
    run_id: str,
    session: DbSession,
    state: State,
    limit: Annotated[
        int, Query(ge=1, le=TRIES_LIMIT, description="task instances on this page")
    ] = 500,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET, description="task instances skipped")] = 0,
) -> RunTries:
    """Every try of the run's task instances, with when it was queued, started and ended
    (what the run's Gantt chart draws), a page of task instances in the DAG's order.

    The database keeps one queue time per task instance: an earlier try's `queued_at` is
    null, as are the times of an earlier try that stored no log once a later try started."""
    dag, run = find_run(session, dag_id, run_id)
    order = state.shapes.shape(dag).order
    return run_tries(session, run, order, limit=limit, offset=offset)


@router.post(
    "/{run_id}/cancel", response_model=RunOut, dependencies=[CanWrite], responses=errors(404, 409)
)
def cancel_run(
    dag_id: str,
    run_id: str,
    session: DbSession,
    state: State,
    after: BackgroundTasks,
    caller: Caller,
) -> RunOut:
    """Stop a queued or running run, as `sluice dags cancel` does: its tasks not started are
    skipped, its queued and running tries fail and are stopped, and the run fails."""
    _, run = find_run(session, dag_id, run_id)
    try:
        done = operations.cancel_run(session, run, who=caller, now=utcnow())
    except operations.RunFinished as exc:
        raise ApiError(409, str(exc)) from None
    after.add_task(operations.stop_tries, state.settings, done)
    session.refresh(run)
    return run_out(run, state.config, version=version_of(session, run))


@router.post(
    "/{run_id}/mark", response_model=MarkOut, dependencies=[CanWrite], responses=errors(404, 409)
)
def mark_run(
    dag_id: str,
    run_id: str,
    body: RunMarkIn,
    session: DbSession,
    state: State,
    after: BackgroundTasks,
    caller: Caller,
) -> MarkOut:
    """Mark the run `success` or `failed` with its task instances, as `sluice dags mark`
    does: the tries it takes are stopped. 409 if the run is in that state already."""
    _, run = find_run(session, dag_id, run_id)
    return apply_mark(
        session,
        state.settings,
        after,
        run,
        lambda: operations.mark_a_run(
            session, run, DagRunState(body.state), who=caller, now=utcnow()
        ),
    )


@router.put(
    "/{run_id}/note", response_model=NoteOut, dependencies=[CanWrite], responses=errors(404)
)
def set_run_note(
    dag_id: str, run_id: str, body: NoteIn, session: DbSession, caller: Caller
) -> NoteOut:
    """Set the run's note (one line, at most 500 characters), as `sluice dags note` does."""
    _, run = find_run(session, dag_id, run_id)
    try:
        event = operations.note_on(session, run, None, body.note, who=caller, now=utcnow())
    except InputError as exc:
        raise unprocessable(str(exc)) from None
    return note_from(event)
