"""Deciding, in memory, what one TaskInstance of a run may do next, and whether the
run is over.

Input is the run's TI states (from one query) and the serialized DAG; nothing here
touches the database. The whole run's decision is `run_decision.decide_run`, a mapped
task's `mapped.decide_mapped`; what a decision reads and decides is plain data in
`decisions` (`TiView`, `Decisions`, `Expansion`); this module holds what they share: the TIs by task
(`RunTis`, a mapped task's in map-index order), a task's cap on its running TIs
(`Limit`), and the verdict for a TI in `none`, checked as Airflow does:
1. a direct upstream branch task succeeded and did not pick this task → skipped;
2. otherwise the task's trigger rule over its upstream TIs (every index of a mapped
   upstream; of an upstream it maps one to one, the same index) decides
   (`tasks.trigger_rules.decide`): run → scheduled, skip → skipped,
   upstream_failed → upstream_failed, wait → nothing yet.
`decide_one` is the worker's form for one TI of an unmapped task; `run_outcome` ends a
run from its leaves.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sluice.scheduler.core.states import TI, TaskInstanceState
from sluice.scheduler.decide.decisions import TiView
from sluice.scheduler.decide.per_version import PerVersion
from sluice.tasks.trigger_rules import TriggerRule, UpstreamCounts, Verdict, decide

_DONE = frozenset({TI.SUCCESS, TI.FAILED, TI.UPSTREAM_FAILED, TI.SKIPPED, TI.REMOVED})


_BY_VERSION = 256
"""DAG versions whose task order, and whose deciding tasks, a process keeps."""
_ORDERS: PerVersion[str, tuple[str, ...]] = PerVersion(_BY_VERSION)
_DECIDING: PerVersion[str, tuple[str, ...]] = PerVersion(_BY_VERSION)


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
    """Upstream before downstream; kept by the DAG's version hash."""
    return _ORDERS.get(
        version_hash,
        lambda: _topological_order({t: s["upstream"] for t, s in spec["tasks"].items()}),
    )


def results_that_decide(spec: Mapping[str, Any], version_hash: str) -> tuple[str, ...]:
    """The tasks whose stored results a decision reads: branch tasks (their choice) and
    the unmapped tasks a mapped task expands over (their items). Every other TI's result,
    up to 64 KiB each, is left unread (kept by the DAG's version hash)."""
    return _DECIDING.get(
        version_hash,
        lambda: tuple(
            sorted(
                task_id
                for task_id, task in spec["tasks"].items()
                if task.get("is_branch") or task.get("map_output") is not None
            )
        ),
    )


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


class RunTis:
    """One run's TIs by task (each task's in map-index order) and their states as the
    decision goes (a move decided upstream is seen downstream in the same pass)."""

    def __init__(self, tis: list[TiView]) -> None:
        self.by_task: dict[str, list[TiView]] = {}
        several: list[list[TiView]] = []
        for ti in tis:
            found = self.by_task.get(ti.task_id)
            if found is None:
                self.by_task[ti.task_id] = [ti]
            else:
                if len(found) == 1:
                    several.append(found)
                found.append(ti)
        for found in several:  # a mapped task's indexes, in map-index order
            found.sort(key=lambda t: t.map_index)
        self.state: dict[int, TaskInstanceState] = {ti.id: ti.state for ti in tis}

    def states(self, task_id: str) -> list[TaskInstanceState]:
        return [self.state[ti.id] for ti in self.by_task.get(task_id, ())]

    def upstream_tis(
        self, task: Mapping[str, Any], per_index: str | None = None, index: int = -1
    ) -> dict[str, list[TiView]]:
        """Each upstream's TIs a TI of `task` depends on: all of them, but for the
        `per_index` upstream only its index `index`."""
        found: dict[str, list[TiView]] = {}
        for up in task["upstream"]:
            tis = self.by_task.get(up)
            if tis is None:
                continue
            if up == per_index:
                tis = [ti for ti in tis if ti.map_index == index]
            found[up] = tis
        return found


@dataclass
class Limit:
    """How many more of a task's TIs may be scheduled in this run now: its
    `max_active_tis_per_dagrun` less those scheduled, queued or running (no limit: None)."""

    left: int | None

    @classmethod
    def of(cls, task: Mapping[str, Any], tis: list[TiView], run: RunTis) -> Limit:
        cap = task.get("max_active_tis_per_dagrun")
        if cap is None:
            return _NO_LIMIT
        busy = sum(run.state[ti.id] in (TI.SCHEDULED, TI.QUEUED, TI.RUNNING) for ti in tis)
        return cls(max(int(cap) - busy, 0))

    def take(self) -> bool:
        if self.left is None:
            return True
        if self.left <= 0:
            return False
        self.left -= 1
        return True


_NO_LIMIT = Limit(None)
"""Shared by every task without a cap (`take` never changes it)."""


def verdict_state(
    task: Mapping[str, Any],
    tasks: Mapping[str, Any],
    run: RunTis,
    per_index: str | None = None,
    index: int = -1,
) -> TaskInstanceState | None:
    """The move of a `none` TI of `task` (None: wait): skipped if a branch upstream did
    not pick it, else its trigger rule's verdict over every upstream TI (of the
    `per_index` upstream only its index `index`: `RunTis.upstream_tis`)."""
    task_id = task["task_id"]
    state = run.state
    states: list[TaskInstanceState] = []
    for up, tis in run.upstream_tis(task, per_index, index).items():
        branch = tasks[up].get("is_branch")
        for ti in tis:
            current = state[ti.id]
            if branch and current is TI.SUCCESS and _not_chosen(task_id, ti.result):
                return TI.SKIPPED
            states.append(current)
    return _verdict(task, states)


VERDICT_MOVES: dict[Verdict, TaskInstanceState] = {
    Verdict.RUN: TI.SCHEDULED,
    Verdict.SKIP: TI.SKIPPED,
    Verdict.UPSTREAM_FAILED: TI.UPSTREAM_FAILED,
}


def _not_chosen(task_id: str, branch_result: str | None) -> bool:
    """Whether a successful branch task, by its stored choice, did not pick `task_id`."""
    chosen = branch_choice(branch_result)
    return chosen is not None and task_id not in chosen


def _verdict(task: Mapping[str, Any], states: list[TaskInstanceState]) -> TaskInstanceState | None:
    """The move `task`'s trigger rule makes of its upstream TIs' `states` (None: wait)."""
    return VERDICT_MOVES.get(decide(TriggerRule(task["trigger_rule"]), upstream_counts(states)))


def decide_one(
    task: Mapping[str, Any],
    tasks: Mapping[str, Any],
    by_task: Mapping[str, TiView],
    state: Mapping[str, TaskInstanceState],
) -> TaskInstanceState | None:
    """The move for one `none` TI (None: wait); `state` must hold all its upstreams' TIs."""
    upstream = [u for u in task["upstream"] if u in state]
    for up in upstream:
        branch = tasks[up].get("is_branch") and state[up] is TI.SUCCESS
        if branch and _not_chosen(task["task_id"], by_task[up].result):
            return TI.SKIPPED
    return _verdict(task, [state[u] for u in upstream])


def upstream_counts(states: list[TaskInstanceState]) -> UpstreamCounts:
    counted = Counter(states)
    return UpstreamCounts(
        total=len(states),
        success=counted[TI.SUCCESS],
        skipped=counted[TI.SKIPPED],
        failed=counted[TI.FAILED],
        upstream_failed=counted[TI.UPSTREAM_FAILED],
        removed=counted[TI.REMOVED],
        done=sum(counted[s] for s in _DONE),
    )


def run_outcome(
    spec: Mapping[str, Any], tis: list[TiView], overrides: Mapping[int, TaskInstanceState]
) -> TaskInstanceState | None:
    """The run's end as Airflow decides it from the leaves, or None while unfinished.

    `overrides` are the moves just decided (not yet re-read). Returns SUCCESS or
    FAILED when every TI is finished: failed if any leaf failed or upstream_failed.
    """
    for ti in tis:  # unfinished: the common answer, found without building anything
        if overrides.get(ti.id, ti.state) not in _DONE:
            return None
    states: dict[str, list[TaskInstanceState]] = {}
    for ti in tis:
        states.setdefault(ti.task_id, []).append(overrides.get(ti.id, ti.state))
    tasks = spec["tasks"]
    live = {tid for tid, found in states.items() if any(s is not TI.REMOVED for s in found)}
    leaves = [
        tid for tid in live if not any(d in live for d in tasks.get(tid, {}).get("downstream", []))
    ]
    if any(s in (TI.FAILED, TI.UPSTREAM_FAILED) for leaf in leaves for s in states[leaf]):
        return TI.FAILED
    return TI.SUCCESS
