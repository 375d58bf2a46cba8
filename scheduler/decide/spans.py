"""The span lifecycle of DagRuns and TaskInstances (docs/architecture.md, Tracing).

Ownership: the job in `dag_run.started_by_job_id` owns the spans of that run
and of its TaskInstances, and is the only one to end them. `span_status`:
- `not_started` → `active` when the run starts or the TI is first queued (its
  start time and parent span are written into `context_carrier`);
- `active` → `ended` when the owner sees it finish (the span is exported with
  the stored ids and times, flushed, then the status committed);
- `active` → `should_end` when another job sees it finish; the owner ends it on
  its next loop (`end_owned_spans`);
- `active` → `needs_continuance` when the owner exits gracefully: it ends the
  span early and the next job to drive the run becomes the owner and opens a
  "… continued" child span, under which the rest of the run nests;
- when the owner dies, the job that releases it takes ownership and marks the
  spans `recreated`: they are exported later with the same ids and start times.
Every function runs inside the caller's transaction; `span_status` writes go
through `transitions.move_spans`.
"""

from __future__ import annotations

import datetime as dt
import secrets
from collections.abc import Sequence
from typing import Any

from sqlalchemy import select, text, update
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from sluice.scheduler.core.models import OPEN_SPANS, DagRun, TaskInstance
from sluice.scheduler.core.states import TI_TERMINAL, SpanStatus
from sluice.scheduler.core.tracing import Tracing
from sluice.scheduler.core.transitions import move_spans

S = SpanStatus


def _ids(carrier: dict[str, Any]) -> tuple[str, str]:
    _, trace_id, span_id, _ = carrier["traceparent"].split("-")
    return trace_id, span_id


def _new_span_id() -> str:
    return secrets.token_hex(8)


def current_span_id(run_carrier: dict[str, Any]) -> str:
    """The span new children of the run nest under: the run's, or its latest continuation."""
    continued = run_carrier.get("continued")
    return str(continued["span_id"]) if continued else _ids(run_carrier)[1]


def activated(carrier: dict[str, Any], now: dt.datetime, parent: str | None) -> dict[str, Any]:
    out = dict(carrier)
    out["start"] = now.isoformat()
    if parent is not None:
        out["parent"] = parent
    return out


def continued(carrier: dict[str, Any], now: dt.datetime) -> dict[str, Any]:
    """The carrier after a takeover: a new continuation span under the last one."""
    out = dict(carrier)
    previous = carrier.get("continued")
    parent = previous["span_id"] if previous else _ids(carrier)[1]
    out["continued"] = {"span_id": _new_span_id(), "start": now.isoformat(), "parent": parent}
    out.pop("recreated", None)
    return out


# -- exporting ----------------------------------------------------------------------------------
def _emit(
    tracing: Tracing,
    name: str,
    carrier: dict[str, Any],
    default_parent: str | None,
    end: dt.datetime,
    attributes: dict[str, Any],
    error: bool,
) -> None:
    trace_id, span_id = _ids(carrier)
    start = dt.datetime.fromisoformat(carrier.get("start") or end.isoformat())
    parent = carrier.get("parent", default_parent)
    cont = carrier.get("continued")
    if cont:
        name, parent, span_id = f"{name} continued", cont["parent"], cont["span_id"]
        start = dt.datetime.fromisoformat(cont["start"])
    if carrier.get("recreated"):
        name = f"{name} recreated"
    tracing.emit(
        name,
        trace_id=trace_id,
        span_id=span_id,
        parent_id=parent,
        start=start,
        end=end,
        attributes=attributes,
        error=error,
    )


def emit_run(tracing: Tracing, run: DagRun, end: dt.datetime, state: str | None = None) -> None:
    state = state or str(run.state)
    _emit(
        tracing,
        f"dag_run {run.dag_id}",
        run.context_carrier,
        None,
        end,
        {"dag_id": run.dag_id, "run_id": run.run_id, "run_type": str(run.run_type), "state": state},
        error=state == "failed",
    )


def emit_ti(tracing: Tracing, ti: TaskInstance, end: dt.datetime) -> None:
    mapped = ti.map_index >= 0
    _emit(
        tracing,
        f"task {ti.task_id}[{ti.map_index}]" if mapped else f"task {ti.task_id}",
        ti.context_carrier,
        None,
        end,
        {
            "dag_id": ti.dag_id,
            "run_id": ti.run_id,
            "task_id": ti.task_id,
            **({"map_index": ti.map_index} if mapped else {}),
            "try_number": ti.try_number,
            "attempt_id": ti.attempt_id,
            "queue": ti.queue,
            "state": str(ti.state),
            "hostname": ti.hostname,
        },
        error=str(ti.state) in ("failed", "upstream_failed"),
    )


def emit_exit_marker(tracing: Tracing, run: DagRun, job_id: int | None, now: dt.datetime) -> None:
    trace_id, _ = _ids(run.context_carrier)
    tracing.emit(
        "scheduler exited",
        trace_id=trace_id,
        span_id=_new_span_id(),
        parent_id=current_span_id(run.context_carrier),
        start=now,
        end=now + dt.timedelta(milliseconds=1),
        attributes={"job_id": job_id},
    )


# -- the lifecycle ------------------------------------------------------------------------------
def start_run_span(run: DagRun, now: dt.datetime) -> dict[str, Any]:
    """Values that make a starting run's span active (merged into its queued → running move)."""
    if run.span_status != S.NOT_STARTED:
        return {}
    return {"span_status": S.ACTIVE, "context_carrier": activated(run.context_carrier, now, None)}


def start_ti_spans(session: Session, ti_ids: Sequence[int], now: dt.datetime) -> None:
    """Activate the spans of TIs queued for the first time, under their run's current span."""
    rows = session.execute(
        select(TaskInstance.id, TaskInstance.context_carrier, DagRun.context_carrier)
        .join(DagRun, DagRun.id == TaskInstance.dag_run_id)
        .where(TaskInstance.id.in_(list(ti_ids)), TaskInstance.span_status == S.NOT_STARTED)
    ).all()
    for ti_id, carrier, run_carrier in rows:
        move_spans(
            session,
            TaskInstance,
            [ti_id],
            S.ACTIVE,
            expect=[S.NOT_STARTED],
            values={"context_carrier": activated(carrier, now, current_span_id(run_carrier))},
        )


def finish_spans(
    session: Session,
    tracing: Tracing,
    run: DagRun,
    job_id: int | None,
    now: dt.datetime,
    finished: str | None,
) -> None:
    """After a run was decided: end (owner) or mark should_end (others) what finished.

    `finished` is the run's new terminal state if this decision ended it.
    """
    mine = run.started_by_job_id == job_id
    tis = session.scalars(
        select(TaskInstance).where(
            TaskInstance.dag_run_id == run.id,
            TaskInstance.span_status.in_([S.ACTIVE, S.NOT_STARTED]),
            TaskInstance.state.in_(list(TI_TERMINAL)),
        )
    ).all()
    _start_never_queued(session, run, tis, now)
    run_done = finished is not None
    if not tis and not run_done:
        return
    if mine:
        for ti in tis:
            emit_ti(tracing, ti, ti.end_date or now)
        if run_done and run.span_status == S.ACTIVE:
            emit_run(tracing, run, now, finished)
        tracing.flush()
    new = S.ENDED if mine else S.SHOULD_END
    move_spans(session, TaskInstance, [ti.id for ti in tis], new, expect=[S.ACTIVE])
    if run_done:
        move_spans(session, DagRun, [run.id], new, expect=[S.ACTIVE])


def _start_never_queued(
    session: Session, run: DagRun, tis: Sequence[TaskInstance], now: dt.datetime
) -> None:
    """Activate the spans of TIs that finished without ever being queued (skipped,
    upstream_failed, removed): an instant at their end, under the run's current span, so
    the run's trace shows every task of the DAG."""
    for ti in tis:
        if ti.span_status != S.NOT_STARTED:
            continue
        carrier = activated(
            ti.context_carrier, ti.end_date or now, current_span_id(run.context_carrier)
        )
        move_spans(
            session,
            TaskInstance,
            [ti.id],
            S.ACTIVE,
            expect=[S.NOT_STARTED],
            values={"context_carrier": carrier},
        )
        # the loaded row learns what was written without becoming dirty (see continue_run)
        set_committed_value(ti, "context_carrier", carrier)
        set_committed_value(ti, "span_status", S.ACTIVE)


def end_owned_spans(
    session: Session, tracing: Tracing, job_id: int | None, now: dt.datetime
) -> int:
    """The owner ends the spans another job marked should_end."""
    runs = session.scalars(
        select(DagRun).where(DagRun.started_by_job_id == job_id, DagRun.span_status == S.SHOULD_END)
    ).all()
    tis = session.scalars(
        select(TaskInstance)
        .join(DagRun, DagRun.id == TaskInstance.dag_run_id)
        .where(DagRun.started_by_job_id == job_id, TaskInstance.span_status == S.SHOULD_END)
    ).all()
    if not runs and not tis:
        return 0
    for ti in tis:
        emit_ti(tracing, ti, ti.end_date or now)
    for run in runs:
        emit_run(tracing, run, run.end_date or now)
    tracing.flush()
    move_spans(session, TaskInstance, [t.id for t in tis], S.ENDED, expect=[S.SHOULD_END])
    move_spans(session, DagRun, [r.id for r in runs], S.ENDED, expect=[S.SHOULD_END])
    return len(runs) + len(tis)


def suspend_owned_spans(
    session: Session, tracing: Tracing, job_id: int | None, now: dt.datetime
) -> int:
    """On a graceful exit: end every span this job owns; unfinished ones need continuance."""
    end_owned_spans(session, tracing, job_id, now)
    runs = session.scalars(
        select(DagRun).where(DagRun.started_by_job_id == job_id, DagRun.span_status == S.ACTIVE)
    ).all()
    for run in runs:
        tis = session.scalars(
            select(TaskInstance).where(
                TaskInstance.dag_run_id == run.id, TaskInstance.span_status == S.ACTIVE
            )
        ).all()
        for ti in tis:
            emit_ti(tracing, ti, ti.end_date or now)
        emit_run(tracing, run, now)
        emit_exit_marker(tracing, run, job_id, now)
        done = [ti.id for ti in tis if ti.state in TI_TERMINAL]
        move_spans(session, TaskInstance, done, S.ENDED, expect=[S.ACTIVE])
        move_spans(
            session,
            TaskInstance,
            [ti.id for ti in tis if ti.id not in done],
            S.NEEDS_CONTINUANCE,
            expect=[S.ACTIVE],
        )
        move_spans(session, DagRun, [run.id], S.NEEDS_CONTINUANCE, expect=[S.ACTIVE])
    tracing.flush()
    return len(runs)


def continue_run(session: Session, run: DagRun, job_id: int | None, now: dt.datetime) -> None:
    """Take over a run whose owner exited: open "… continued" spans for it and its TIs."""
    carrier = continued(run.context_carrier, now)
    move_spans(
        session,
        DagRun,
        [run.id],
        S.ACTIVE,
        expect=[S.NEEDS_CONTINUANCE],
        values={"context_carrier": carrier, "started_by_job_id": job_id},
    )
    # the loaded row learns what was written without becoming dirty: a flush at commit
    # would write these columns again, over a later move of the same transaction
    # (finish_spans ending the run's span in the same pass)
    set_committed_value(run, "context_carrier", carrier)
    set_committed_value(run, "started_by_job_id", job_id)
    set_committed_value(run, "span_status", S.ACTIVE)
    for ti_id, ti_carrier in session.execute(
        select(TaskInstance.id, TaskInstance.context_carrier).where(
            TaskInstance.dag_run_id == run.id, TaskInstance.span_status == S.NEEDS_CONTINUANCE
        )
    ).all():
        move_spans(
            session,
            TaskInstance,
            [ti_id],
            S.ACTIVE,
            expect=[S.NEEDS_CONTINUANCE],
            values={"context_carrier": continued(ti_carrier, now)},
        )


def adopt_spans_of_dead(session: Session, dead_job_ids: Sequence[int], job_id: int | None) -> None:
    """Take ownership of a dead job's spans; they will be re-created with their ids."""
    if not dead_job_ids:
        return
    runs = session.scalars(
        select(DagRun).where(
            DagRun.started_by_job_id.in_(list(dead_job_ids)),
            text(OPEN_SPANS),  # inline: the partial index ix_dag_run_open_spans
        )
    ).all()
    for run in runs:
        session.execute(
            update(DagRun)
            .where(DagRun.id == run.id)
            .values(
                started_by_job_id=job_id, context_carrier={**run.context_carrier, "recreated": True}
            )
            .execution_options(synchronize_session=False)
        )
        for ti_id, carrier in session.execute(
            select(TaskInstance.id, TaskInstance.context_carrier).where(
                TaskInstance.dag_run_id == run.id,
                TaskInstance.span_status.in_([S.ACTIVE, S.SHOULD_END]),
            )
        ).all():
            session.execute(
                update(TaskInstance)
                .where(TaskInstance.id == ti_id)
                .values(context_carrier={**carrier, "recreated": True})
                .execution_options(synchronize_session=False)
            )
    # needs_continuance runs of a dead job simply wait for the next driver
