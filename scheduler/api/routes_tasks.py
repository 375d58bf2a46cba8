"""`/api/v1/dags/{dag_id}/runs/{run_id}/tasks`: task instances, clearing, and logs.

Clearing goes through `scheduler.scheduling.clearing.clear_task_instances`, as `sluice
tasks clear` does, and wakes the schedulers the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, BackgroundTasks, Query
from sqlalchemy import select
from sqlalchemy.orm import Session

from sluice.scheduler.api.deps import Caller, CanRead, CanWrite, DbSession, State
from sluice.scheduler.api.errors import ApiError, not_found, unprocessable
from sluice.scheduler.api.lookups import find_run, find_task, find_ti
from sluice.scheduler.api.paging import Limit, Offset
from sluice.scheduler.api.responses import errors
from sluice.scheduler.api.schemas import (
    RESULT_SHOWN_CHARS,
    ClearOut,
    ClearRequest,
    MarkOut,
    NoteIn,
    NoteOut,
    TaskInstanceDetail,
    TaskInstanceList,
    TaskLogOut,
    TaskMarkIn,
    TriggerOut,
    TryOut,
)
from sluice.scheduler.api.ti_pages import page_of_tis
from sluice.scheduler.api.views import note_from, note_out, ti_fields, ti_out, trace_id_of
from sluice.scheduler.control import operations
from sluice.scheduler.control.explain import ExplainError, explain_ti
from sluice.scheduler.control.inputs import MAX_MAP_INDEX, MAX_TRY, InputError
from sluice.scheduler.control.operations import revoke_external_tasks, wake_schedulers
from sluice.scheduler.core.dag_cache import dag_of_run
from sluice.scheduler.core.db import utcnow
from sluice.scheduler.core.models import DagRun, TaskInstance, Trigger
from sluice.scheduler.core.queries.masked_results import masked_result_of
from sluice.scheduler.core.queries.task_logs import task_log_of, tries_of
from sluice.scheduler.core.settings import Settings
from sluice.scheduler.core.states import TI, TaskInstanceState
from sluice.scheduler.scheduling.clearing import UnknownTask, clear_task_instances, groups_of
from sluice.scheduler.scheduling.marking import Marked
from sluice.tasks.triggers import EVENT_CLASSPATH

router = APIRouter(prefix="/api/v1/dags/{dag_id}/runs/{run_id}/tasks", tags=["tasks"])


MapIndex = Annotated[
    int | None, Query(ge=0, le=MAX_MAP_INDEX, description="the index of a mapped task")
]


@router.get("", response_model=TaskInstanceList, dependencies=[CanRead], responses=errors(404))
def list_task_instances(
    dag_id: str,
    run_id: str,
    session: DbSession,
    state: State,
    task_id: Annotated[str | None, Query(max_length=250, description="only this task")] = None,
    map_index: MapIndex = None,
    ti_state: Annotated[
        TaskInstanceState | None, Query(alias="state", description="only in this state")
    ] = None,
    limit: Limit = 100,
    offset: Offset = 0,
) -> TaskInstanceList:
    """A page of the run's task instances, in the DAG's topological order (a mapped
    task's by map index), filtered by task, map index and state, with how many match."""
    dag, run = find_run(session, dag_id, run_id)
    where = []
    if task_id is not None:
        where.append(TaskInstance.task_id == task_id)
    if map_index is not None:
        where.append(TaskInstance.map_index == map_index)
    if ti_state is not None:
        where.append(TaskInstance.state == ti_state)
    order = state.shapes.shape(dag).order
    page = page_of_tis(session, run.id, order, where, limit=limit, offset=offset)
    return TaskInstanceList(
        task_instances=[ti_out(ti) for ti in page.tis],
        total=page.total,
        limit=limit,
        offset=offset,
    )


@router.get(
    "/{task_id}", response_model=TaskInstanceDetail, dependencies=[CanRead], responses=errors(404)
)
def get_task_instance(
    dag_id: str,
    run_id: str,
    task_id: str,
    session: DbSession,
    state: State,
    map_index: MapIndex = None,
) -> TaskInstanceDetail:
    """One task instance with its tries (those that stored a log, and the current one); a
    mapped task's is named by `map_index`."""
    dag, run, ti = find_ti(session, dag_id, run_id, task_id, map_index)
    logged = {t.try_number: t for t in tries_of(session, ti.id)}
    # After a clear (none) or before a retry is queued (scheduled), try_number still names
    # the previous try, whose outcome the TI row no longer holds.
    holds_its_try = ti.state not in (TI.NONE, TI.SCHEDULED)
    tries: list[TryOut] = []
    for number in sorted({*logged, *range(1, ti.try_number + 1)}):
        info = logged.get(number)
        current = number == ti.try_number and holds_its_try
        tries.append(
            TryOut(
                try_number=number,
                attempt_id=info.attempt_id if info else (ti.attempt_id if current else None),
                hostname=info.hostname if info else (ti.hostname if current else None),
                started_at=info.started_at if info else (ti.start_date if current else None),
                finished_at=info.finished_at if info else (ti.end_date if current else None),
                state=ti.state if current else None,
                has_log=info is not None,
            )
        )
    spec = dag.serialized.get("tasks", {}).get(ti.task_id, {})
    why, reasons = _why(session, run.dag_id, run.run_id, ti.task_id, state, map_index)
    return TaskInstanceDetail(
        why=why,
        reasons=reasons,
        **ti_fields(ti),
        dag_id=run.dag_id,
        run_id=run.run_id,
        upstream=sorted(spec.get("upstream", [])),
        downstream=sorted(spec.get("downstream", [])),
        tries=tries,
        trace_url=state.config.trace_link(trace_id_of(run.context_carrier)),
        note=note_out(session, run.dag_id, run.run_id, ti.task_id),
        trigger=trigger_out(session, ti) if ti.state == TI.DEFERRED else None,
        **shown_result(session, ti),
    )


def shown_result(session: Session, ti: TaskInstance) -> dict[str, Any]:
    """The TI's result as shown (`result`, `result_truncated`): the masked form its worker
    kept if the try returned a secret it read (`MaskedResult`), else as stored; cut at
    `RESULT_SHOWN_CHARS`."""
    if ti.result is None:
        return {}
    text = masked_result_of(session, ti.id, ti.try_number) or ti.result
    cut = len(text) > RESULT_SHOWN_CHARS
    return {"result": text[:RESULT_SHOWN_CHARS], "result_truncated": cut}


def trigger_out(session: Session, ti: TaskInstance) -> TriggerOut | None:
    """What a deferred TI waits on (one query); None while its trigger is being recorded
    or has just fired."""
    row = session.scalar(select(Trigger).where(Trigger.ti_id == ti.id))
    if row is None:
        return None
    key = row.kwargs.get("key") if row.classpath == EVENT_CLASSPATH else None
    return TriggerOut(
        classpath=row.classpath,
        kwargs=row.kwargs,
        since=ti.end_date,
        until=row.timeout_at,
        event_key=key if isinstance(key, str) else None,
    )


@router.put(
    "/{task_id}/note", response_model=NoteOut, dependencies=[CanWrite], responses=errors(404)
)
def set_task_note(
    dag_id: str, run_id: str, task_id: str, body: NoteIn, session: DbSession, caller: Caller
) -> NoteOut:
    """Set the task instance's note (one line, at most 500 characters), as `sluice tasks
    note` does (a mapped task's note is the task's, for all its indexes)."""
    _, run = find_task(session, dag_id, run_id, task_id)
    try:
        event = operations.note_on(session, run, task_id, body.note, who=caller, now=utcnow())
    except InputError as exc:
        raise unprocessable(str(exc)) from None
    return note_from(event)


@router.post(
    "/{task_id}/clear", response_model=ClearOut, dependencies=[CanWrite], responses=errors(404)
)
def clear_task(
    dag_id: str,
    run_id: str,
    task_id: str,
    session: DbSession,
    state: State,
    after: BackgroundTasks,
    body: ClearRequest | None = None,
) -> ClearOut:
    """Reset the task instance (and with `downstream`, its downstream) so it runs again:
    every index of a mapped task, or with `map_index` that one (and with `downstream` only
    what depends on it). A task group's id in place of `task_id` clears the group's tasks
    (its nested groups' included; with `map_index`, that index of each)."""
    map_index = body.map_index if body is not None else None
    dag, run = find_run(session, dag_id, run_id)
    dag = dag_of_run(session, run) or dag  # the run's own version: a clear keeps it
    if task_id not in groups_of(dag):
        if map_index is not None:
            found, run, _ = find_ti(session, dag_id, run_id, task_id, map_index)
        else:
            found, run = find_task(session, dag_id, run_id, task_id)
        dag = dag_of_run(session, run) or found
    downstream = body.downstream if body is not None else False
    try:
        cleared = clear_task_instances(
            session, run, dag, [task_id], downstream=downstream, now=utcnow(), map_index=map_index
        )
    except UnknownTask as exc:  # a TI of a task the run's version no longer has
        raise not_found(str(exc)) from None
    after.add_task(revoke_external_tasks, state.settings, cleared.external_ids)
    after.add_task(wake_schedulers, state.settings)
    run_state = session.scalar(select(DagRun.state).where(DagRun.id == run.id))
    assert run_state is not None
    return ClearOut(cleared=cleared.count, run_state=run_state)


@router.get(
    "/{task_id}/logs", response_model=TaskLogOut, dependencies=[CanRead], responses=errors(404)
)
def task_logs(
    dag_id: str,
    run_id: str,
    task_id: str,
    session: DbSession,
    try_number: Annotated[
        int | None, Query(ge=1, le=MAX_TRY, description="default: the current try")
    ] = None,
    map_index: MapIndex = None,
) -> TaskLogOut:
    """What one try printed and logged (empty while nothing was stored); a mapped task's
    index is named by `map_index`."""
    _, run, ti = find_ti(session, dag_id, run_id, task_id, map_index)
    number = try_number if try_number is not None else ti.try_number
    stored = task_log_of(session, ti.id, number) if number >= 1 else None
    if stored is None and not 1 <= number <= ti.try_number:
        if number == 0:
            raise not_found(f"task {task_id!r} of run {run_id!r} has not run yet")
        raise not_found(f"task {task_id!r} of run {run_id!r} has no try {number}")
    return TaskLogOut(
        dag_id=run.dag_id,
        run_id=run.run_id,
        task_id=ti.task_id,
        try_number=number,
        attempt_id=stored.attempt_id if stored else None,
        hostname=stored.hostname if stored else None,
        started_at=stored.started_at if stored else None,
        updated_at=stored.updated_at if stored else None,
        finished_at=stored.finished_at if stored else None,
        dropped_lines=stored.dropped_lines if stored else 0,
        content=stored.content if stored else "",
    )


def _why(
    session: Session,
    dag_id: str,
    run_id: str,
    task_id: str,
    state: State,
    map_index: int | None = None,
) -> tuple[str | None, list[str]]:
    """The plain-words explanation of `sluice tasks explain` (workers not asked: too slow)."""
    try:
        found = explain_ti(
            session,
            dag_id,
            run_id,
            task_id,
            utcnow(),
            workers_by_queue=None,
            settings=state.settings,
            map_index=map_index,
        )
    except ExplainError:
        return None, []
    return found.summary, [reason.detail for reason in found.reasons]


@router.post(
    "/{task_id}/mark", response_model=MarkOut, dependencies=[CanWrite], responses=errors(404, 409)
)
def mark_task(
    dag_id: str,
    run_id: str,
    task_id: str,
    body: TaskMarkIn,
    session: DbSession,
    state: State,
    after: BackgroundTasks,
    caller: Caller,
) -> MarkOut:
    """Mark the task instance (with `downstream` / `upstream`, those too) `success`,
    `failed` or `skipped`, as `sluice tasks mark` does: the tries it takes are stopped,
    and a success starts the downstream it makes ready (every index of a mapped task). 409
    if all are in that state."""
    dag, run = find_task(session, dag_id, run_id, task_id)
    return apply_mark(
        session,
        state.settings,
        after,
        run,
        lambda: operations.mark_tasks(
            session,
            run,
            dag,
            task_id,
            TI(body.state),
            upstream=body.upstream,
            downstream=body.downstream,
            who=caller,
            now=utcnow(),
        ),
    )


def apply_mark(
    session: Session,
    settings: Settings,
    after: BackgroundTasks,
    run: DagRun,
    mark: Callable[[], Marked],
) -> MarkOut:
    """Run `mark` in the request's transaction (409 and nothing written if there was
    nothing to mark); once it is committed, stop the tries it took and wake the
    schedulers (`after`)."""
    try:
        done = mark()
    except operations.NothingToMark as exc:
        raise ApiError(409, str(exc)) from None
    except operations.UnknownTaskId as exc:  # a TI of a task its DAG no longer has
        raise not_found(str(exc)) from None
    after.add_task(operations.after_mark, settings, run, done)
    run_state = session.scalar(select(DagRun.state).where(DagRun.id == run.id))
    assert run_state is not None
    return MarkOut(marked=done.task_ids, stopped=len(done.attempts), run_state=run_state)
