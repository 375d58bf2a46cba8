"""Deciding a mapped task's TIs (its indexes) within one run's decision, in memory.

A mapped task starts as one TI, map index -1, in `none`. When its trigger rule lets it
run and every TI it has is `none` (its first time, or cleared as a whole), it is
expanded: its sources are counted (`tasks.mapping.map_length`, from the stored results
of the upstreams it expands over), and it asks for indexes 0..n-1, all scheduled, up to
its `max_active_tis_per_dagrun`; for zero items its TIs are `skipped`; an input that
is not a list or a dict, or more items than its max_map_length, fails it with one line.
Otherwise each `none` index is decided on its own, with the task's verdict.

A task expanded over one mapped task's output alone (`per_index`) follows that task's
indexes: once they exist it asks for the same indexes (`none`, to be decided), and its
index i waits for that task's index i and every TI of its other upstreams, so a chain
of mapped tasks runs index by index.

The expansion is written by `scheduling.expanding` in the run's locked transaction.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sluice.scheduler.core.states import TI
from sluice.scheduler.decide.decisions import Decisions, Expansion, TiView
from sluice.scheduler.decide.deps import Limit, RunTis, verdict_state
from sluice.tasks.mapping import MapInputError, check_length, map_length, per_index_of


def decide_mapped(
    task: Mapping[str, Any],
    tasks: Mapping[str, Any],
    run: RunTis,
    limit: Limit,
    decisions: Decisions,
    max_map_length: int,
) -> None:
    """Decide the `none` TIs of mapped `task` (see the module's docstring)."""
    mine = run.by_task[task["task_id"]]
    per_index = per_index_of(task)
    if per_index is not None and any(ti.map_index >= 0 for ti in run.by_task.get(per_index, ())):
        _follow_indexes(task, tasks, run, limit, decisions, per_index)
        return
    nones = [ti for ti in mine if run.state[ti.id] is TI.NONE]
    if not nones:
        return
    new = verdict_state(task, tasks, run)
    if new is None:
        return
    live = [ti for ti in mine if run.state[ti.id] is not TI.REMOVED]
    if new is not TI.SCHEDULED:
        _move(run, decisions, nones, new)
    elif len(nones) < len(live):  # expanded before: a cleared index reruns
        _move(run, decisions, [ti for ti in nones if limit.take()], TI.SCHEDULED)
    elif per_index is not None:  # the mapped upstream never expanded: nothing to map
        _move(run, decisions, nones, TI.SKIPPED)
    else:
        _expand(task, run, limit, decisions, mine, nones, max_map_length)


def _expand(
    task: Mapping[str, Any],
    run: RunTis,
    limit: Limit,
    decisions: Decisions,
    mine: list[TiView],
    nones: list[TiView],
    max_map_length: int,
) -> None:
    task_id = task["task_id"]
    cap = min(int(task.get("max_map_length") or max_map_length), max_map_length)
    try:
        count = map_length(
            task["map"]["mode"], task["map"]["args"], _outputs(run), f"mapped task '{task_id}'"
        )
        check_length(count, cap, f"mapped task '{task_id}'")
    except MapInputError as exc:
        first = nones[0]
        _move(run, decisions, [first], TI.FAILED)
        decisions.errors[first.id] = str(exc)
        _move(run, decisions, nones[1:], TI.SKIPPED)
        return
    if count == 0:
        _move(run, decisions, nones, TI.SKIPPED)
        return
    indexes = tuple(range(count))
    schedule = tuple(i for i in indexes if limit.take())
    decisions.expansions.append(Expansion(task_id, tuple(mine), indexes, schedule))


def _outputs(run: RunTis) -> Any:
    """An upstream's output as a mapped task counts it: an unmapped task's stored result
    (None, so zero items, unless it succeeded), a mapped task's successful indexes (their
    results are not read: only their count matters here; each item's form is checked
    by the index that takes it, when it runs)."""

    def value_of(task_id: str) -> Any:
        tis = run.by_task.get(task_id, [])
        if any(ti.map_index >= 0 for ti in tis):
            return [{} for ti in tis if run.state[ti.id] is TI.SUCCESS]
        done = [ti for ti in tis if run.state[ti.id] is TI.SUCCESS and ti.result is not None]
        value = json.loads(done[0].result) if done and done[0].result else None
        return [] if value is None else value

    return value_of


def _follow_indexes(
    task: Mapping[str, Any],
    tasks: Mapping[str, Any],
    run: RunTis,
    limit: Limit,
    decisions: Decisions,
    per_index: str,
) -> None:
    """A task mapped one to one over `per_index`, which has expanded: the same indexes,
    then each `none` index decided against that task's same index."""
    mine = run.by_task[task["task_id"]]
    if any(ti.map_index < 0 and run.state[ti.id] is not TI.NONE for ti in mine):
        return  # decided before its upstream expanded (and not cleared since): left so
    wanted = tuple(
        ti.map_index
        for ti in run.by_task[per_index]
        if ti.map_index >= 0 and run.state[ti.id] is not TI.REMOVED
    )
    if not wanted:  # every index of its upstream removed: nothing to map
        _move(run, decisions, [ti for ti in mine if run.state[ti.id] is TI.NONE], TI.SKIPPED)
        return
    kept = set(wanted)
    live = {ti.map_index for ti in mine if run.state[ti.id] is not TI.REMOVED}
    extra = [ti for ti in mine if ti.map_index not in kept and run.state[ti.id] is TI.NONE]
    if -1 in live or kept - live or extra:
        decisions.expansions.append(Expansion(task["task_id"], tuple(mine), wanted))
        return
    for ti in mine:
        if run.state[ti.id] is not TI.NONE:
            continue
        new = verdict_state(task, tasks, run, per_index, ti.map_index)
        if new is TI.SCHEDULED and not limit.take():
            continue
        if new is not None:
            _move(run, decisions, [ti], new)


def _move(run: RunTis, decisions: Decisions, tis: list[TiView], new: TI) -> None:
    for ti in tis:
        run.state[ti.id] = new
        decisions.add(new, ti.id)
