"""Deciding, in memory, which TaskInstances of one run may move on.

Input is the run's TI states (from one query) and the serialized DAG; output
is the set of moves to make. Nothing here touches the database.

Order of checks for a TI in `none`, as Airflow does:
1. a direct upstream branch task succeeded and did not pick this task → skipped;
2. otherwise the task's trigger rule over its upstream states decides
   (`tasks.trigger_rules.decide`): run → scheduled, skip → skipped,
   upstream_failed → upstream_failed, wait → nothing yet.
TIs are visited in topological order, so a decision flows downstream within
one pass. An `up_for_retry` TI whose `next_retry_at` has passed → scheduled.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sluice.scheduler.core.states import TI, TaskInstanceState
from sluice.tasks.trigger_rules import TriggerRule, UpstreamCounts, Verdict, decide

_DONE = frozenset({TI.SUCCESS, TI.FAILED, TI.UPSTREAM_FAILED, TI.SKIPPED, TI.REMOVED})


@dataclass(frozen=True)
class TiView:
    """What the decision needs of one TaskInstance."""

    id: int
    task_id: str
    state: TaskInstanceState
    next_retry_at: dt.datetime | None = None
    result: str | None = None


@dataclass
class Decisions:
    """Target state → ids of the TIs to move there (all from `none` or `up_for_retry`)."""

    moves: dict[TaskInstanceState, list[int]] = field(default_factory=dict)
    retries: list[int] = field(default_factory=list)

    def add(self, state: TaskInstanceState, ti_id: int) -> None:
        self.moves.setdefault(state, []).append(ti_id)


_TOPO_CACHE: dict[str, tuple[str, ...]] = {}
_TOPO_CACHE_SIZE = 256


def _topological_order(upstream: Mapping[str, Sequence[str]]) -> tuple[str, ...]:
    order: list[str] = []
    seen: set[str] = set()
    for start in upstream:
        stack: list[tuple[str, bool]] = [(start, False)]
        while stack:
            node, expanded = stack.pop()
            if expanded:
                order.append(node)
                continue
            if node in seen:
                continue
            seen.add(node)
            stack.append((node, True))
            stack.extend((up, False) for up in upstream.get(node, ()) if up not in seen)
    return tuple(order)


def topological_order(spec: Mapping[str, Any], version_hash: str) -> tuple[str, ...]:
    """Upstream before downstream; cached by the DAG's version hash."""
    order = _TOPO_CACHE.get(version_hash)
    if order is None:
        order = _topological_order({t: s["upstream"] for t, s in spec["tasks"].items()})
        if len(_TOPO_CACHE) >= _TOPO_CACHE_SIZE:
            _TOPO_CACHE.pop(next(iter(_TOPO_CACHE)))
        _TOPO_CACHE[version_hash] = order
    return order


def branch_choice(result: str | None) -> set[str] | None:
    """The task ids a successful branch task picked (its stored return value)."""
    if result is None:
        return set()
    value = json.loads(result)
    if value is None:
        return set()
    if isinstance(value, str):
        return {value}
    return {str(v) for v in value}


def decide_run(
    spec: Mapping[str, Any], version_hash: str, tis: list[TiView], now: dt.datetime
) -> Decisions:
    """Decide every TI of one run; `tis` are all the run's TIs."""
    tasks = spec["tasks"]
    by_task = {ti.task_id: ti for ti in tis}
    state = {ti.task_id: ti.state for ti in tis}
    decisions = Decisions()
    for task_id in topological_order(spec, version_hash):
        ti = by_task.get(task_id)
        if ti is None:
            continue
        current = state[task_id]
        if current is TI.UP_FOR_RETRY:
            if ti.next_retry_at is None or ti.next_retry_at <= now:
                decisions.add(TI.SCHEDULED, ti.id)
                decisions.retries.append(ti.id)
            continue
        if current is not TI.NONE:
            continue
        task = tasks[task_id]
        new = decide_one(task, tasks, by_task, state)
        if new is not None:
            state[task_id] = new
            decisions.add(new, ti.id)
    return decisions


def decide_one(
    task: Mapping[str, Any],
    tasks: Mapping[str, Any],
    by_task: Mapping[str, TiView],
    state: Mapping[str, TaskInstanceState],
) -> TaskInstanceState | None:
    """The move for one `none` TI (None: wait); `state` must hold all its upstreams' TIs."""
    upstream = [u for u in task["upstream"] if u in state]
    for up in upstream:
        if tasks[up].get("is_branch") and state[up] is TI.SUCCESS:
            chosen = branch_choice(by_task[up].result)
            if chosen is not None and task["task_id"] not in chosen:
                return TI.SKIPPED
    counts = upstream_counts([state[u] for u in upstream])
    verdict = decide(TriggerRule(task["trigger_rule"]), counts)
    if verdict is Verdict.RUN:
        return TI.SCHEDULED
    if verdict is Verdict.SKIP:
        return TI.SKIPPED
    if verdict is Verdict.UPSTREAM_FAILED:
        return TI.UPSTREAM_FAILED
    return None


def upstream_counts(states: list[TaskInstanceState]) -> UpstreamCounts:
    return UpstreamCounts(
        total=len(states),
        success=sum(s is TI.SUCCESS for s in states),
        skipped=sum(s is TI.SKIPPED for s in states),
        failed=sum(s is TI.FAILED for s in states),
        upstream_failed=sum(s is TI.UPSTREAM_FAILED for s in states),
        removed=sum(s is TI.REMOVED for s in states),
        done=sum(s in _DONE for s in states),
    )


def run_outcome(
    spec: Mapping[str, Any], tis: list[TiView], overrides: Mapping[int, TaskInstanceState]
) -> TaskInstanceState | None:
    """The run's end as Airflow decides it from the leaves, or None while unfinished.

    `overrides` are the moves just decided (not yet re-read). Returns SUCCESS or
    FAILED when every TI is finished: failed if any leaf failed or upstream_failed.
    """
    states = {ti.task_id: overrides.get(ti.id, ti.state) for ti in tis}
    if any(s not in _DONE for s in states.values()):
        return None
    tasks = spec["tasks"]
    live = {tid for tid, s in states.items() if s is not TI.REMOVED}
    leaves = [
        tid for tid in live if not any(d in live for d in tasks.get(tid, {}).get("downstream", []))
    ]
    if any(states[leaf] in (TI.FAILED, TI.UPSTREAM_FAILED) for leaf in leaves):
        return TI.FAILED
    return TI.SUCCESS
