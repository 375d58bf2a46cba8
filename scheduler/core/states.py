"""Every state of Sluice and the moves allowed between them.

The move tables below are the only definition of the state machines. Writes go
through `scheduler.core.transitions`, which checks a move against these tables.
"""

from __future__ import annotations

from enum import StrEnum


class TaskInstanceState(StrEnum):
    NONE = "none"
    SCHEDULED = "scheduled"
    QUEUED = "queued"
    RUNNING = "running"
    SUCCESS = "success"
    FAILED = "failed"
    UP_FOR_RETRY = "up_for_retry"
    UP_FOR_RESCHEDULE = "up_for_reschedule"
    """A reschedule-mode sensor between two pokes: no worker, no pool slot; scheduled
    again at `next_retry_at`, its `try_number` unchanged (`tasks.sensor`)."""
    DEFERRED = "deferred"
    """Waiting on a trigger (`sluice.defer`): no worker, no pool slot; a triggerer queues
    it again when the trigger fires, its `try_number` unchanged (`tasks.triggers`)."""
    UPSTREAM_FAILED = "upstream_failed"
    SKIPPED = "skipped"
    REMOVED = "removed"


class DagRunState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCESS = "success"
    FAILED = "failed"


class SpanStatus(StrEnum):
    NOT_STARTED = "not_started"
    ACTIVE = "active"
    SHOULD_END = "should_end"
    NEEDS_CONTINUANCE = "needs_continuance"
    ENDED = "ended"


class RunType(StrEnum):
    SCHEDULED = "scheduled"
    MANUAL = "manual"
    BACKFILL = "backfill"
    ASSET_TRIGGERED = "asset_triggered"
    WATCH = "watch"


class JobState(StrEnum):
    RUNNING = "running"
    SUCCESS = "success"
    FAILED = "failed"


TI = TaskInstanceState

TI_TERMINAL: frozenset[TaskInstanceState] = frozenset(
    {TI.SUCCESS, TI.FAILED, TI.UPSTREAM_FAILED, TI.SKIPPED, TI.REMOVED}
)
"""States a TaskInstance leaves only when a user clears it (or its task reappears)."""

TI_UNFINISHED: frozenset[TaskInstanceState] = frozenset(TI) - TI_TERMINAL

TI_ACTIVE: frozenset[TaskInstanceState] = frozenset({TI.QUEUED, TI.RUNNING})
"""States that occupy a pool slot and count against max_active_tasks."""

TI_WAITING: frozenset[TaskInstanceState] = frozenset({TI.UP_FOR_RETRY, TI.UP_FOR_RESCHEDULE})
"""States a scheduler moves back to `scheduled` once `next_retry_at` has passed."""

TI_PARKED: frozenset[TaskInstanceState] = TI_WAITING | {TI.DEFERRED}
"""States of a started TI that holds no worker: between tries, pokes, or on a trigger."""

RUN_TERMINAL: frozenset[DagRunState] = frozenset({DagRunState.SUCCESS, DagRunState.FAILED})
RUN_UNFINISHED: frozenset[DagRunState] = frozenset(DagRunState) - RUN_TERMINAL

_CLEARABLE = frozenset({TI.NONE})

_MARKS = frozenset({TI.SUCCESS, TI.FAILED, TI.SKIPPED})
"""A user's mark moves a TI from any state to one of these (`scheduling.marking`)."""

_TI_MOVES_BY_SLUICE: dict[TaskInstanceState, frozenset[TaskInstanceState]] = {
    # Decided by the scheduler from upstream states; removed by verify_integrity.
    TI.NONE: frozenset({TI.SCHEDULED, TI.SKIPPED, TI.UPSTREAM_FAILED, TI.REMOVED}),
    # Queued (with a fresh attempt_id) by a scheduler within the limits.
    TI.SCHEDULED: frozenset({TI.QUEUED, TI.REMOVED, TI.SKIPPED, TI.UPSTREAM_FAILED}) | _CLEARABLE,
    # Claimed by a worker with a compare-and-set on attempt_id.
    TI.QUEUED: frozenset({TI.RUNNING, TI.FAILED, TI.UP_FOR_RETRY, TI.REMOVED}) | _CLEARABLE,
    # Finished by the worker that claimed it, or by a liveness sweep; removed by that
    # worker when the DAG's stored version no longer has its task; a sensor's poke that
    # found nothing yet reschedules it; given back before its code ran when every slot
    # of its concurrency key is held (`broker.worker.concurrency_slots`).
    TI.RUNNING: frozenset(
        {
            TI.SCHEDULED,
            TI.SUCCESS,
            TI.FAILED,
            TI.UP_FOR_RETRY,
            TI.UP_FOR_RESCHEDULE,
            TI.DEFERRED,
            TI.SKIPPED,
            TI.REMOVED,
        }
    )
    | _CLEARABLE,
    TI.UP_FOR_RETRY: frozenset({TI.SCHEDULED, TI.REMOVED, TI.FAILED}) | _CLEARABLE,
    TI.UP_FOR_RESCHEDULE: frozenset({TI.SCHEDULED, TI.REMOVED, TI.FAILED}) | _CLEARABLE,
    # Resumed by a triggerer when its trigger fires; failed (or retried) by its timeout
    # or a trigger that raises.
    TI.DEFERRED: frozenset({TI.SCHEDULED, TI.UP_FOR_RETRY, TI.FAILED, TI.REMOVED}) | _CLEARABLE,
    TI.SUCCESS: _CLEARABLE | {TI.REMOVED},
    TI.FAILED: _CLEARABLE | {TI.REMOVED},
    TI.UPSTREAM_FAILED: _CLEARABLE | {TI.REMOVED},
    TI.SKIPPED: _CLEARABLE | {TI.REMOVED},
    TI.REMOVED: _CLEARABLE,
}

TI_MOVES: dict[TaskInstanceState, frozenset[TaskInstanceState]] = {
    old: targets | (_MARKS - {old}) for old, targets in _TI_MOVES_BY_SLUICE.items()
}
"""Sluice's own moves, plus a user's mark from every state."""

RUN_MOVES: dict[DagRunState, frozenset[DagRunState]] = {
    DagRunState.QUEUED: frozenset({DagRunState.RUNNING, DagRunState.SUCCESS, DagRunState.FAILED}),
    DagRunState.RUNNING: frozenset({DagRunState.SUCCESS, DagRunState.FAILED, DagRunState.QUEUED}),
    # cleared (queued again), or marked the other way by a user
    DagRunState.SUCCESS: frozenset({DagRunState.QUEUED, DagRunState.FAILED}),
    DagRunState.FAILED: frozenset({DagRunState.QUEUED, DagRunState.SUCCESS}),
}

SPAN_MOVES: dict[SpanStatus, frozenset[SpanStatus]] = {
    SpanStatus.NOT_STARTED: frozenset({SpanStatus.ACTIVE, SpanStatus.ENDED}),
    SpanStatus.ACTIVE: frozenset(
        {SpanStatus.ENDED, SpanStatus.SHOULD_END, SpanStatus.NEEDS_CONTINUANCE}
    ),
    SpanStatus.SHOULD_END: frozenset({SpanStatus.ENDED}),
    SpanStatus.NEEDS_CONTINUANCE: frozenset(
        {SpanStatus.ACTIVE, SpanStatus.SHOULD_END, SpanStatus.ENDED}
    ),
    # A cleared TI gets new span ids; a cleared run continues its ended span.
    SpanStatus.ENDED: frozenset({SpanStatus.NOT_STARTED, SpanStatus.NEEDS_CONTINUANCE}),
}


class IllegalMove(ValueError):
    """A write asked for a move the tables above do not allow."""


def check_ti_move(old: TaskInstanceState, new: TaskInstanceState) -> None:
    if new not in TI_MOVES[old]:
        raise IllegalMove(f"task instance cannot move from {old} to {new}")


def check_run_move(old: DagRunState, new: DagRunState) -> None:
    if new not in RUN_MOVES[old]:
        raise IllegalMove(f"dag run cannot move from {old} to {new}")


def check_span_move(old: SpanStatus, new: SpanStatus) -> None:
    if new not in SPAN_MOVES[old]:
        raise IllegalMove(f"span cannot move from {old} to {new}")


def sources_of(new: TaskInstanceState) -> frozenset[TaskInstanceState]:
    """The states from which a TaskInstance may move to `new`."""
    return frozenset(old for old, targets in TI_MOVES.items() if new in targets)
