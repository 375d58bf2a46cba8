"""Marking task instances and runs `success`, `failed` or `skipped` by hand.

What a mark does, as Airflow users expect it and without its bugs:
- A marked TI moves to the state asked from whatever state it is in (one compare-and-set
  per TI on the state read under the run's lock). A try that was queued or running is
  stopped after the commit (`Marked.attempts`, `Marked.external_ids`); its late result
  loses its compare-and-set, so a TI marked failed never comes back to running or success.
- `upstream` / `downstream` add every task upstream / downstream of the chosen ones.
- Marking `success` gives the failed and upstream_failed TIs downstream of the marked
  ones back to the scheduler (reset to `none` with their retries again, as a clear does),
  so what the failure had stopped runs now, as after a real success.
- A run that had ended goes back to `queued` when one of its TIs is marked, and a
  scheduler decides its end again from its TIs (a failed leaf marked success can end
  the run success); a running run is examined by the schedulers the caller wakes.
- Marking a run `success` marks its TIs that are neither success nor skipped `success`;
  marking an unfinished run `failed` ends it by `cancelling.cancel_runs` (tries `failed`,
  the rest `skipped`), with the error "marked failed". Either may be asked of an ended
  run of the other state (then only the run's state moves).

The functions take the caller's session, lock the run's row FOR NO KEY UPDATE first (as
every writer of a run's TIs does) and never commit.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from sluice.scheduler.core.models import Dag, DagRun, TaskInstance
from sluice.scheduler.core.states import (
    RUN_UNFINISHED,
    TI,
    DagRunState,
    SpanStatus,
    TaskInstanceState,
)
from sluice.scheduler.core.transitions import move_run, move_spans, move_tis
from sluice.scheduler.scheduling.cancelling import cancel_runs
from sluice.scheduler.scheduling.clearing import (
    UnknownTask,
    clear_task_instances,
    downstream_closure,
)

MARKED_FAILED = "marked failed"
"""The error of a TI marked failed (and of the tries a run marked failed stopped)."""

TI_MARKS = (TI.SUCCESS, TI.FAILED, TI.SKIPPED)
RUN_MARKS = (DagRunState.SUCCESS, DagRunState.FAILED)


class AlreadyInState(ValueError):
    """Nothing to mark: every chosen TI (or the run) is in that state already."""


@dataclass
class Marked:
    """What a mark did: the task ids it moved, the tries to stop after the commit, and
    whether the run went back to `queued` for a scheduler to start again (`reopened`)."""

    task_ids: list[str] = field(default_factory=list)
    attempts: list[str] = field(default_factory=list)
    external_ids: list[str] = field(default_factory=list)
    reopened: bool = False


def upstream_closure(spec: dict[str, Any], roots: Collection[str]) -> set[str]:
    """`roots` and every task upstream of them in the serialized DAG `spec`."""
    seen: set[str] = set()
    stack = list(roots)
    while stack:
        task_id = stack.pop()
        if task_id not in seen:
            seen.add(task_id)
            stack.extend(spec["tasks"].get(task_id, {}).get("upstream", []))
    return seen


def _lock_run(session: Session, run: DagRun) -> DagRunState:
    """Lock the run's row (FOR NO KEY UPDATE); its state read under the lock."""
    state = session.scalar(
        select(DagRun.state).where(DagRun.id == run.id).with_for_update(key_share=True)
    )
    assert state is not None  # runs are never deleted
    return DagRunState(state)


def _move(
    session: Session, tis: list[TaskInstance], new: TaskInstanceState, now: dt.datetime
) -> Marked:
    """Move `tis` to `new` (each from the state it was read in); the tries to stop."""
    done = Marked()
    values: dict[str, Any] = {"next_retry_at": None}
    values["error"] = MARKED_FAILED if new is TI.FAILED else None
    for ti in tis:
        if not move_tis(session, [ti.id], new, expect=[TI(ti.state)], now=now, values=values):
            continue
        done.task_ids.append(ti.task_id)
        if ti.state in (TI.QUEUED, TI.RUNNING) and ti.attempt_id:
            done.attempts.append(ti.attempt_id)
        if ti.state == TI.RUNNING and ti.external_id:
            done.external_ids.append(ti.external_id)
    move_spans(
        session,
        TaskInstance,
        [ti.id for ti in tis],
        SpanStatus.SHOULD_END,
        expect=[SpanStatus.ACTIVE],
    )
    return done


def _reopen(session: Session, run: DagRun, state: DagRunState, now: dt.datetime) -> bool:
    """An ended run goes back to `queued` (its span continued), for a scheduler to decide
    its end again from its TIs."""
    if state not in (DagRunState.SUCCESS, DagRunState.FAILED):
        return False
    move_run(session, run.id, DagRunState.QUEUED, expect=[state], now=now)
    move_spans(session, DagRun, [run.id], SpanStatus.NEEDS_CONTINUANCE, expect=[SpanStatus.ENDED])
    return True


def mark_task_instances(
    session: Session,
    run: DagRun,
    dag: Dag,
    task_ids: Collection[str],
    new: TaskInstanceState,
    *,
    upstream: bool,
    downstream: bool,
    now: dt.datetime,
) -> Marked:
    """Mark the TIs of `task_ids` (and their upstream/downstream) `new` (module doc).
    Raises UnknownTask or AlreadyInState before writing anything."""
    assert new in TI_MARKS
    spec = dag.serialized
    unknown = sorted(set(task_ids) - set(spec["tasks"]))
    if unknown:
        raise UnknownTask(f"DAG {dag.dag_id!r} has no task {unknown[0]!r}")
    chosen = set(task_ids)
    if downstream:
        chosen |= downstream_closure(spec, sorted(task_ids))
    if upstream:
        chosen |= upstream_closure(spec, task_ids)
    state = _lock_run(session, run)
    tis = session.scalars(
        select(TaskInstance)
        .where(TaskInstance.dag_run_id == run.id, TaskInstance.task_id.in_(sorted(chosen)))
        .order_by(TaskInstance.id)
    ).all()
    to_move = [ti for ti in tis if ti.state != new]
    if not to_move:
        raise AlreadyInState(
            f"task {sorted(task_ids)[0]!r} of run {run.run_id!r} is already {new}"
            + (" (and the others chosen with it)" if len(chosen) > 1 else "")
        )
    done = _move(session, to_move, new, now)
    resumed = new is TI.SUCCESS and _resume_downstream(session, run, dag, chosen, now)
    done.reopened = _reopen(session, run, state, now) or resumed
    return done


def _resume_downstream(
    session: Session,
    run: DagRun,
    dag: Dag,
    marked: set[str],
    now: dt.datetime,
) -> bool:
    """Reset the failed and upstream_failed TIs downstream of `marked` (not marked
    themselves) so the scheduler decides them again, as after a real success; whether
    any was (the run is `queued` then, as after a clear)."""
    below = downstream_closure(dag.serialized, sorted(marked)) - marked
    if not below:
        return False
    failed = session.scalars(
        select(TaskInstance.task_id).where(
            TaskInstance.dag_run_id == run.id,
            TaskInstance.task_id.in_(sorted(below)),
            TaskInstance.state.in_([TI.FAILED, TI.UPSTREAM_FAILED]),
        )
    ).all()
    if failed:
        clear_task_instances(session, run, dag, failed, downstream=False, now=now)
    return bool(failed)


def mark_run(session: Session, run: DagRun, new: DagRunState, *, now: dt.datetime) -> Marked:
    """Mark `run` `new` and its TIs with it (module doc); AlreadyInState if it is."""
    assert new in RUN_MARKS
    state = _lock_run(session, run)
    if state == new:
        raise AlreadyInState(f"run {run.run_id!r} of DAG {run.dag_id!r} is already {new}")
    if new is DagRunState.FAILED and state in RUN_UNFINISHED:  # as a cancel ends it
        ended = cancel_runs(session, [run.id], now, error=MARKED_FAILED)
        return Marked(ended.task_ids, ended.attempts, ended.external_ids)
    done = Marked()
    if new is DagRunState.SUCCESS:
        tis = session.scalars(
            select(TaskInstance).where(TaskInstance.dag_run_id == run.id).order_by(TaskInstance.id)
        ).all()
        unfinished = [t for t in tis if t.state not in (TI.SUCCESS, TI.SKIPPED)]
        done = _move(session, unfinished, TI.SUCCESS, now)
    move_run(session, run.id, new, expect=[state], now=now)
    move_spans(session, DagRun, [run.id], SpanStatus.SHOULD_END, expect=[SpanStatus.ACTIVE])
    return done
