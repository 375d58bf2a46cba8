"""Explain reasons, one builder per TI state; dependencies judged as the scheduler does.

A TI in `none` is judged by `scheduler.decide.deps.decide_run` over its run's TIs (the very
decision the next scheduler loop makes) and its trigger rule by
`tasks.trigger_rules.decide` over `scheduler.decide.deps.upstream_counts`. A `skipped` or
`upstream_failed` TI is explained by the same verdict over the upstream states now;
since a decided TI is never decided again, an earlier verdict may differ from it and
the reason says so.

Invariant: reads only (the caller's session); never writes.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from sqlalchemy import select

from sluice.scheduler.control.explain_limits import (
    driver_reasons,
    limit_reasons,
    no_worker_reasons,
    queue_reasons,
    run_reasons,
)
from sluice.scheduler.control.explain_model import Reason, Subject, duration, iso
from sluice.scheduler.control.explain_model import ReasonKind as K
from sluice.scheduler.core.models import TaskInstance
from sluice.scheduler.core.models import Trigger as TriggerRow
from sluice.scheduler.core.states import TI, TI_UNFINISHED, DagRunState, TaskInstanceState
from sluice.scheduler.decide.decisions import TiView
from sluice.scheduler.decide.deps import RunTis, branch_choice, upstream_counts
from sluice.scheduler.scheduling.run_decision import decide_run
from sluice.tasks.trigger_rules import TriggerRule, UpstreamCounts, Verdict, decide
from sluice.tasks.triggers import CREATE_RUN_CLASSPATH, EVENT_CLASSPATH, RUN_FINISHED_CLASSPATH

_UNFINISHED = frozenset(str(s) for s in TI_UNFINISHED)

VERDICT_STATE: dict[Verdict, TaskInstanceState] = {
    Verdict.RUN: TI.SCHEDULED,
    Verdict.SKIP: TI.SKIPPED,
    Verdict.UPSTREAM_FAILED: TI.UPSTREAM_FAILED,
}
VERDICT_WORDS: dict[Verdict, str] = {
    Verdict.WAIT: "waits",
    Verdict.RUN: "lets it run",
    Verdict.SKIP: "skips it",
    Verdict.UPSTREAM_FAILED: "marks it upstream_failed",
}


def reasons_for(subject: Subject) -> tuple[list[Reason], list[str]]:
    """The reasons behind the subject's state, most decisive first, and notes."""
    ti, run = subject.ti, subject.run
    notes: list[str] = []
    if ti is None:
        return [
            Reason(
                K.NOT_CREATED,
                f"task {subject.task_id!r} was added to the DAG after this run was created; "
                "the run's next scheduling decision creates it",
            )
        ], notes
    state = TI(ti.state)
    running = run.state == DagRunState.RUNNING
    if state is TI.NONE:
        reasons = dependency_reasons(subject, deciding=running)
        if not running:
            reasons = run_reasons(subject) + [_informative(r) for r in reasons]
        return reasons + _not_blocking(no_worker_reasons(subject)), notes
    if state is TI.SCHEDULED:
        if not running:
            return run_reasons(subject), notes
        reasons = limit_reasons(subject)
        if not reasons:
            reasons = [
                Reason(
                    K.READY,
                    "nothing holds it: a scheduler queues it on its next loop, by priority",
                ),
                *driver_reasons(subject),
            ]
        return reasons + _not_blocking(no_worker_reasons(subject)), notes
    if state is TI.QUEUED:
        return queue_reasons(subject), notes
    if state is TI.RUNNING:
        return running_reasons(subject), notes
    if state in WAITING_REASONS:
        reasons = [WAITING_REASONS[state](subject)]
        if not running:
            reasons += run_reasons(subject)
        elif reasons[0].data["due"]:
            reasons += driver_reasons(subject)
        return reasons + _not_blocking(no_worker_reasons(subject)), notes
    if state is TI.DEFERRED:
        return [deferred_reason(subject)], notes
    if state is TI.REMOVED:
        return [removed_reason(subject)], notes
    if state is TI.SKIPPED and ti.start_date is not None:
        return [
            Reason(
                K.SKIPPED_ITSELF,
                f"the task skipped itself (raised Skip) on try {ti.try_number}",
                data={"try_number": ti.try_number, "end_date": iso(ti.end_date)},
            )
        ], notes
    if state in (TI.SKIPPED, TI.UPSTREAM_FAILED):
        return dependency_reasons(subject, deciding=False), notes
    return [finished_reason(subject)], notes


def _not_blocking(reasons: list[Reason]) -> list[Reason]:
    for reason in reasons:
        reason.blocking = False
    return reasons


def _informative(reason: Reason) -> Reason:
    reason.blocking = False
    return reason


def _counts_text(counts: UpstreamCounts) -> str:
    parts = [
        f"{n} {name}"
        for name, n in (
            ("success", counts.success),
            ("skipped", counts.skipped),
            ("failed", counts.failed),
            ("upstream_failed", counts.upstream_failed),
            ("removed", counts.removed),
        )
        if n
    ]
    unfinished = counts.total - counts.done
    if unfinished:
        parts.append(f"{unfinished} not finished")
    return f"{', '.join(parts) or 'none'} of {counts.total}"


def _listing(upstream: list[dict[str, Any]], limit: int = 5) -> str:
    shown = ", ".join(f"{u['task_id']!r} ({u['state']})" for u in upstream[:limit])
    return shown + (f" and {len(upstream) - limit} more" if len(upstream) > limit else "")


def _states_text(tis: list[TiView]) -> str:
    """One TI's state, or a mapped task's indexes counted by state ("2 success, 1 running")."""
    if len(tis) == 1:
        return str(tis[0].state)
    counts: dict[str, int] = {}
    for ti in tis:
        counts[str(ti.state)] = counts.get(str(ti.state), 0) + 1
    return ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))


def dependency_reasons(subject: Subject, *, deciding: bool) -> list[Reason]:
    """Upstream states, branch choices and the trigger rule's verdict.

    `deciding`: the run is running, so the scheduler's next decision is reported too.
    """
    task = subject.task
    if task is None:
        return [removed_reason(subject)]
    tasks = subject.dag.serialized["tasks"]
    index = subject.ti.map_index if subject.ti is not None else -1
    per_index = (task.get("map") or {}).get("per_index")
    ups = RunTis(subject.tis).upstream_tis(task, per_index, index)
    by_task = {u: tis[0] for u, tis in ups.items() if tis}
    upstream_ids = [u for u in task["upstream"] if u in by_task]
    upstream = [{"task_id": u, "state": _states_text(ups[u])} for u in upstream_ids]
    reasons: list[Reason] = []
    for up in upstream_ids:
        if tasks.get(up, {}).get("is_branch") and by_task[up].state is TI.SUCCESS:
            chosen = branch_choice(by_task[up].result)
            if chosen is not None and subject.task_id not in chosen:
                picked = ", ".join(repr(c) for c in sorted(chosen)) or "no task"
                reasons.append(
                    Reason(
                        K.BRANCH_NOT_CHOSEN,
                        f"branch task {up!r} chose {picked}, not this task",
                        data={"branch_task": up, "chosen": sorted(chosen)},
                    )
                )
    counts = upstream_counts([ti.state for u in upstream_ids for ti in ups[u]])
    rule = TriggerRule(task["trigger_rule"])
    verdict = decide(rule, counts)
    waiting = [u for u in upstream if any(ti.state in _UNFINISHED for ti in ups[u["task_id"]])]
    state = TI(subject.ti.state) if subject.ti is not None else TI.NONE
    rule_reason = Reason(
        K.TRIGGER_RULE,
        f"trigger rule {rule} {VERDICT_WORDS[verdict]} (upstream: {_counts_text(counts)})",
        data={"trigger_rule": str(rule), "verdict": str(verdict), "counts": asdict(counts)},
    )
    if state is TI.NONE:
        if waiting and verdict is Verdict.WAIT:
            reasons.append(
                Reason(
                    K.UPSTREAM,
                    f"waiting on upstream {_listing(waiting)}",
                    data={"upstream": upstream, "waiting_on": [u["task_id"] for u in waiting]},
                )
            )
        elif upstream:
            reasons.append(
                Reason(K.UPSTREAM, f"upstream {_listing(upstream)}", False, {"upstream": upstream})
            )
        if deciding:
            nxt = _next_decision(subject)
            rule_reason.data["next_state"] = str(nxt) if nxt is not None else None
            if nxt is not None:
                rule_reason.detail += f": the next scheduler decision moves it to {nxt}"
        reasons.append(rule_reason)
        if deciding and rule_reason.data.get("next_state"):
            reasons += driver_reasons(subject)
        return reasons
    # skipped / upstream_failed, decided by the scheduler earlier.
    if VERDICT_STATE.get(verdict) is state:
        rule_reason.detail = (
            f"trigger rule {rule} decided {state} from its upstream: {_listing(upstream)}"
        )
    elif reasons and state is TI.SKIPPED:
        rule_reason.detail = (
            f"the branch decides before trigger rule {rule}, which "
            f"{VERDICT_WORDS[verdict]} (upstream: {_counts_text(counts)})"
        )
    else:
        rule_reason.detail = (
            f"trigger rule {rule} decided {state} from the upstream states at the time; "
            f"with the states now ({_listing(upstream)}) it {VERDICT_WORDS[verdict]}"
        )
    rule_reason.data["upstream"] = upstream
    rule_reason.blocking = not (reasons and state is TI.SKIPPED)
    return reasons + [rule_reason]


def _next_decision(subject: Subject) -> TaskInstanceState | None:
    """What the scheduler's next `decide_run` of this run does with the subject TI."""
    assert subject.ti is not None
    decisions = decide_run(
        subject.dag.serialized, subject.dag.version_hash, subject.tis, subject.now
    )
    for new, ids in decisions.moves.items():
        if subject.ti.id in ids:
            return new
    return None


def running_reasons(subject: Subject) -> list[Reason]:
    ti, now, settings = subject.ti, subject.now, subject.settings
    assert ti is not None
    since = (now - ti.start_date).total_seconds() if ti.start_date else 0.0
    beat = (now - ti.last_heartbeat_at).total_seconds() if ti.last_heartbeat_at else None
    reasons = [
        Reason(
            K.RUNNING,
            f"try {ti.try_number} of {ti.max_tries} runs on {ti.hostname or '?'} "
            f"(pid {ti.pid or '?'}) since {duration(since)} ago"
            + (f", last heartbeat {duration(beat)} ago" if beat is not None else ""),
            data={
                "hostname": ti.hostname,
                "pid": ti.pid,
                "start_date": iso(ti.start_date),
                "last_heartbeat_at": iso(ti.last_heartbeat_at),
                "heartbeat_age_seconds": None if beat is None else round(beat, 3),
                "try_number": ti.try_number,
                "max_tries": ti.max_tries,
            },
        )
    ]
    if beat is not None and beat > settings.heartbeat_timeout:
        then = "up_for_retry" if ti.try_number < ti.max_tries else "failed"
        reasons.append(
            Reason(
                K.HEARTBEAT_STOPPED,
                f"its worker stopped heartbeating {duration(beat)} ago (timeout "
                f"{settings.heartbeat_timeout:g}s): a scheduler moves it to {then}",
                data={"heartbeat_timeout": settings.heartbeat_timeout, "then": then},
            )
        )
    return reasons


def _due(subject: Subject, what: str) -> tuple[float, str]:
    """A waiting TI's seconds to its `next_retry_at` (0 when due or unset) and, in words,
    when `what` (its retry, its next poke) is due and who acts then."""
    ti, now = subject.ti, subject.now
    assert ti is not None
    due_at = ti.next_retry_at
    wait = 0.0 if due_at is None else max((due_at - now).total_seconds(), 0.0)
    if due_at is None or wait <= 0:
        return wait, f"{what} is due now: the next scheduler decision schedules it"
    return wait, f"{what} is due at {due_at:%Y-%m-%d %H:%M:%S} UTC, in {duration(wait)}"


def retry_reason(subject: Subject) -> Reason:
    ti = subject.ti
    assert ti is not None
    wait, when = _due(subject, "its retry")
    error = f" ({ti.error})" if ti.error else ""
    return Reason(
        K.RETRY,
        f"try {ti.try_number} of {ti.max_tries} failed{error}; {when}",
        data={
            "try_number": ti.try_number,
            "max_tries": ti.max_tries,
            "next_try": ti.try_number + 1,
            "next_retry_at": iso(ti.next_retry_at),
            "due": wait <= 0,
            "due_in_seconds": round(wait, 3),
            "error": ti.error,
        },
    )


def _sensor_state(ti: TaskInstance) -> tuple[int, int | None, dt.datetime | None]:
    """A sensor's try, empty pokes so far and first poke, as its worker keeps them between
    pokes (`task_instance.waiting`, `tasks.sensor.Waiting`); the TI's try number (and
    None, None) when they are not kept or do not parse."""
    kept = ti.waiting if isinstance(ti.waiting, dict) else {}
    number, pokes, since = kept.get("try"), kept.get("pokes"), kept.get("since")
    try:
        first = dt.datetime.fromisoformat(since) if isinstance(since, str) else None
    except ValueError:
        first = None
    return (
        number if isinstance(number, int) else ti.try_number,
        pokes if isinstance(pokes, int) else None,
        first,
    )


def reschedule_reason(subject: Subject) -> Reason:
    """A reschedule-mode sensor between two pokes: its try goes on, holding no worker and
    no pool slot until its next poke is due (`next_retry_at`); a scheduler then schedules
    and queues it like any TI."""
    ti = subject.ti
    assert ti is not None
    number, pokes, since = _sensor_state(ti)
    wait, when = _due(subject, "its next poke")
    if wait <= 0:
        when += " and a scheduler queues it"
    so_far = (
        f" ({pokes} empty poke{'s' if pokes != 1 else ''} since {since:%Y-%m-%d %H:%M:%S} UTC)"
        if pokes and since is not None
        else ""
    )
    return Reason(
        K.RESCHEDULE,
        f"the sensor's try {number} of {ti.max_tries} found its condition not met at its "
        f"last poke{so_far}; {when}",
        data={
            "try_number": number,
            "max_tries": ti.max_tries,
            "pokes": pokes,
            "first_poke_at": iso(since),
            "next_poke_at": iso(ti.next_retry_at),
            "due": wait <= 0,
            "due_in_seconds": round(wait, 3),
        },
    )


def deferred_reason(subject: Subject) -> Reason:
    """A deferred TI: what its trigger waits for (class and arguments), since when, until
    when, and whether a triggerer runs it now (a lease) or none has taken it yet."""
    ti = subject.ti
    assert ti is not None
    row = subject.session.scalar(select(TriggerRow).where(TriggerRow.ti_id == ti.id))
    since = ti.end_date
    if row is None:
        text = "it deferred, and its trigger is being recorded or has just fired"
        data: dict[str, Any] = {"trigger": None}
    else:
        arguments = ", ".join(f"{k}={v!r}" for k, v in sorted(row.kwargs.items()))
        until = (
            f" until {row.timeout_at:%Y-%m-%d %H:%M:%S} UTC (then it fails)"
            if row.timeout_at is not None
            else ""
        )
        held = row.lease_until is not None and row.lease_until > subject.now
        if row.classpath == EVENT_CLASSPATH:  # never leased: an event fires it
            by = f"; `sluice events send {row.kwargs.get('key')}` (or the UI's Approve) resumes it"
        elif row.classpath == RUN_FINISHED_CLASSPATH:  # never leased: the run's end fires it
            by = "; a triggerer resumes it when that run ends"
        elif row.classpath == CREATE_RUN_CLASSPATH:  # never leased: a triggerer creates it
            by = "; a triggerer creates that run and resumes it (start `sluice triggerer`)"
        elif held:
            by = f"; triggerer job {row.triggerer_id} runs it"
        else:
            by = "; no triggerer runs it now: start `sluice triggerer`"
        text = f"it waits on its trigger {row.classpath}({arguments[:300]}){until}{by}"
        data = {
            "trigger": row.classpath,
            "kwargs": row.kwargs,
            "since": iso(since),
            "until": iso(row.timeout_at),
            "triggerer_job_id": row.triggerer_id if held else None,
        }
    return Reason(K.DEFERRED, text, data=data)


WAITING_REASONS: dict[TaskInstanceState, Callable[[Subject], Reason]] = {
    TI.UP_FOR_RETRY: retry_reason,
    TI.UP_FOR_RESCHEDULE: reschedule_reason,
}
"""The reason of each state in which a TI waits for its `next_retry_at` (`TI_WAITING`):
when it is due; then the run's next decision schedules it (`run_decision`)."""


def removed_reason(subject: Subject) -> Reason:
    dag_id, task_id = subject.dag.dag_id, subject.task_id
    back = subject.task is not None
    if subject.ti is not None and subject.ti.state == TI.REMOVED:
        detail = f"task {task_id!r} was removed from DAG {dag_id!r}"
        if back:
            detail += "; it is in the DAG again: the run's next decision resets it"
    else:
        detail = (
            f"task {task_id!r} is no longer in DAG {dag_id!r}: "
            "the run's next decision marks it removed"
        )
    return Reason(K.REMOVED, detail, data={"in_dag_now": back, "fileloc": subject.dag.fileloc})


def finished_reason(subject: Subject) -> Reason:
    ti = subject.ti
    assert ti is not None
    took = (
        f" in {duration((ti.end_date - ti.start_date).total_seconds())}"
        if ti.start_date and ti.end_date
        else ""
    )
    where = f" on {ti.hostname}" if ti.hostname else ""
    if ti.state == TI.SUCCESS:
        detail = f"try {ti.try_number} of {ti.max_tries} succeeded{where}{took}"
    else:
        detail = f"try {ti.try_number} of {ti.max_tries} failed{where}{took}"
        detail += f": {ti.error}" if ti.error else " (no error recorded)"
    return Reason(
        K.FINISHED,
        detail,
        data={
            "try_number": ti.try_number,
            "max_tries": ti.max_tries,
            "error": ti.error,
            "hostname": ti.hostname,
            "start_date": iso(ti.start_date),
            "end_date": iso(ti.end_date),
        },
    )
