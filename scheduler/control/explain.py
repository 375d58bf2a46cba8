"""Why a TaskInstance is in its state, in plain words (`sluice tasks explain`).

`explain_ti` reads one run's rows and answers with an `Explanation`: a one-sentence
`summary` and the `reasons` behind it, each with a `kind` (a `ReasonKind`), a plain
`detail` and structured fields for `--json`.

Invariants:
- Reading never writes: every query is a plain SELECT in the caller's session (no
  lock, no flush, nothing added to it); the caller may roll back or close it after.
- Nothing is decided twice: dependency verdicts come from `scheduler.decide.deps.decide_run`
  (what the scheduler itself would decide now) and `tasks.trigger_rules.decide`; pool
  and max_active_tasks are counted as `scheduler.decide.queueing.queue_scheduled` counts them.
- It is a snapshot: a scheduler or worker may move the TI right after it is read.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import select
from sqlalchemy.orm import Session

from sluice.scheduler.control.explain_model import (
    ExplainError,
    Explanation,
    Reason,
    ReasonKind,
    Subject,
    iso,
)
from sluice.scheduler.control.explain_reasons import reasons_for
from sluice.scheduler.core.dag_cache import dag_of_run
from sluice.scheduler.core.models import AuditEvent, Dag, DagRun, TaskInstance
from sluice.scheduler.core.queries import audit
from sluice.scheduler.core.settings import Settings
from sluice.scheduler.core.states import TI
from sluice.scheduler.decide.decisions import TiView

__all__ = [
    "ExplainError",
    "Explanation",
    "Reason",
    "ReasonKind",
    "WAITS_FOR_A_WORKER",
    "explain_ti",
    "main_reasons",
]


LEADS: dict[str, str] = {
    TI.NONE: "Not scheduled yet",
    TI.SCHEDULED: "Scheduled but not queued",
    TI.QUEUED: "Queued but not running",
    TI.RUNNING: "Running",
    TI.UP_FOR_RETRY: "Waiting to retry",
    TI.UP_FOR_RESCHEDULE: "Waiting for its next poke",
    TI.DEFERRED: "Waiting on its trigger",
    TI.SUCCESS: "Succeeded",
    TI.FAILED: "Failed",
    TI.UPSTREAM_FAILED: "Upstream failed",
    TI.SKIPPED: "Skipped",
    TI.REMOVED: "Removed",
}


WAITS_FOR_A_WORKER = frozenset({TI.NONE, TI.SCHEDULED, TI.QUEUED, TI.UP_FOR_RETRY})
"""States in which a TI may still wait for a worker to serve its queue: only then do
the workers matter to an explanation (a finished or running TI's do not). Not
`up_for_reschedule`: a sensor between two pokes waits for its time, not for a worker
(a worker served its queue at its last poke; they are asked once it is scheduled again)."""


def main_reasons(reasons: list[Reason]) -> list[str]:
    """What holds a TI in its state: the first two blocking reasons (else the first)."""
    return [r.detail for r in reasons if r.blocking][:2] or [r.detail for r in reasons][:1]


def summarize(state: str, reasons: list[Reason]) -> str:
    """One sentence: the state, then what holds it (`main_reasons`)."""
    lead = LEADS.get(state, state)
    main = main_reasons(reasons)
    return f"{lead}: {'; '.join(main)}." if main else f"{lead}."


def load_subject(
    session: Session,
    dag_id: str,
    run_id: str,
    task_id: str,
    now: dt.datetime,
    settings: Settings,
    workers: dict[str, list[str]] | None,
    map_index: int | None = None,
) -> Subject:
    dag = session.scalar(select(Dag).where(Dag.dag_id == dag_id))
    if dag is None:
        raise ExplainError(f"unknown DAG {dag_id!r}")
    run = session.scalar(select(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))
    if run is None:
        raise ExplainError(f"DAG {dag_id!r} has no run {run_id!r}")
    dag = dag_of_run(session, run) or dag  # a git bundle's run is explained by its version
    rows = session.scalars(select(TaskInstance).where(TaskInstance.dag_run_id == run.id)).all()
    wanted = -1 if map_index is None else map_index
    ti = next((r for r in rows if r.task_id == task_id and r.map_index == wanted), None)
    if ti is None and task_id not in dag.serialized["tasks"]:
        raise ExplainError(f"run {run_id!r} of DAG {dag_id!r} has no task {task_id!r}")
    indexes = sorted(r.map_index for r in rows if r.task_id == task_id and r.map_index >= 0)
    if ti is None and (indexes or map_index is not None):
        shown = f"{indexes[0]}..{indexes[-1]}" if indexes else "none"
        if map_index is None:
            raise ExplainError(
                f"run {run_id!r} of DAG {dag_id!r} has task {task_id!r} mapped: name one of "
                f"its indexes {shown} with --map-index"
            )
        raise ExplainError(
            f"run {run_id!r} of DAG {dag_id!r} has no index {map_index} of task {task_id!r} "
            f"(its indexes: {shown})"
        )
    views = [
        TiView(
            id=r.id,
            task_id=r.task_id,
            state=TI(r.state),
            next_retry_at=r.next_retry_at,
            result=r.result,
            map_index=r.map_index,
        )
        for r in rows
    ]
    return Subject(session, now, settings, dag, run, ti, task_id, views, workers)


def _what_of(event: AuditEvent) -> str:
    """What an audit event is about: `task 'x'`, or `the run`."""
    return f"task {event.task_id!r}" if event.task_id else "the run"


def operator_reason(event: AuditEvent) -> Reason:
    """Who did the newest operation on the TI or its run, and when."""
    detail = f"{event.action} of {_what_of(event)} by {event.who} at {iso(event.at)}"
    return Reason(
        ReasonKind.OPERATOR,
        detail + (f" ({event.detail})" if event.detail else ""),
        blocking=False,
        data={"action": event.action, "who": event.who, "at": iso(event.at)},
    )


def note_reason(event: AuditEvent) -> Reason:
    """A note on the TI or its run: its text, who wrote it, when."""
    return Reason(
        ReasonKind.NOTE,
        f"note on {_what_of(event)} by {event.who} at {iso(event.at)}: {event.detail}",
        blocking=False,
        data={"note": event.detail, "who": event.who, "at": iso(event.at)},
    )


def explain_ti(
    session: Session,
    dag_id: str,
    run_id: str,
    task_id: str,
    now: dt.datetime,
    *,
    workers_by_queue: dict[str, list[str]] | None,
    settings: Settings | None = None,
    map_index: int | None = None,
) -> Explanation:
    """Explain why TI (dag_id, run_id, task_id) is in its state at `now`.

    `workers_by_queue` (Sluice queue → worker names, from `scheduler.control.workers`) says who
    serves each queue; None means "not asked", and nothing is said about workers.
    `settings` gives the namespace and timeouts (defaults when None).
    Raises ExplainError for an unknown DAG, run or task.
    """
    settings = settings or Settings()
    subject = load_subject(
        session, dag_id, run_id, task_id, now, settings, workers_by_queue, map_index
    )
    reasons, notes = reasons_for(subject)
    event = audit.latest(session, dag_id, run_id, task_id)
    if event is not None:
        reasons.append(operator_reason(event))
    for of in (task_id, None):
        note = audit.latest_note(session, dag_id, run_id, of)
        if note is not None:
            reasons.append(note_reason(note))
    ti = subject.ti
    state = str(ti.state) if ti is not None else str(TI.NONE)
    if workers_by_queue is None and (ti is None or TI(ti.state) in WAITS_FOR_A_WORKER):
        notes.append("the workers were not asked which queues they serve")
    elif getattr(workers_by_queue, "note", None):
        notes.append(str(getattr(workers_by_queue, "note", "")))
    spec_task = subject.task or {}
    return Explanation(
        dag_id=dag_id,
        run_id=run_id,
        task_id=task_id,
        map_index=ti.map_index if ti is not None and ti.map_index >= 0 else None,
        state=state,
        run_state=str(subject.run.state),
        try_number=ti.try_number if ti is not None else 0,
        max_tries=ti.max_tries if ti is not None else int(spec_task.get("retries") or 0) + 1,
        queue=ti.queue if ti is not None else str(spec_task.get("queue") or "default"),
        pool=ti.pool if ti is not None else str(spec_task.get("pool") or "default_pool"),
        summary=summarize(state, reasons),
        reasons=reasons,
        notes=notes,
    )
