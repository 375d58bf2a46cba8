"""Deciding one run's TIs in memory: the scheduler's full decision (`decide_run`).

Nothing here touches the database. TIs are visited in topological order, so a move
decided upstream flows downstream within one pass. For each task: an `up_for_retry` or
`up_for_reschedule` TI whose `next_retry_at` has passed is scheduled again; a `none` TI is judged by
`deps.verdict_state` (a branch's choice, then the trigger rule over every upstream TI);
a mapped task's TIs by `mapped.decide_mapped`, which may ask for an expansion. A task's
`max_active_tis_per_dagrun` bounds how many of its TIs are scheduled (`deps.Limit`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from sluice.scheduler.core.states import TI, TI_WAITING
from sluice.scheduler.decide.decisions import Decisions, TiView
from sluice.scheduler.decide.deps import Limit, RunTis, topological_order, verdict_state
from sluice.scheduler.scheduling.mapped import decide_mapped
from sluice.tasks.mapping import DEFAULT_MAX_MAP_LENGTH


def decide_run(
    spec: Mapping[str, Any],
    version_hash: str,
    tis: list[TiView],
    now: dt.datetime,
    *,
    max_map_length: int = DEFAULT_MAX_MAP_LENGTH,
) -> Decisions:
    """Decide every TI of one run; `tis` are all the run's TIs (a mapped task's indexes
    among them: `mapped.decide_mapped` decides those)."""
    tasks = spec["tasks"]
    run = RunTis(tis)
    state = run.state
    decisions = Decisions()
    for task_id in topological_order(spec, version_hash):
        mine = run.by_task.get(task_id)
        if not mine:
            continue
        task = tasks[task_id]
        if len(mine) == 1 and task.get("map") is None and not task.get(_CAP):
            # the common case: one TI, no mapping, no cap on its running TIs
            ti = mine[0]
            current = state[ti.id]
            if current is TI.NONE:
                new = verdict_state(task, tasks, run)
                if new is not None:
                    state[ti.id] = new
                    decisions.add(new, ti.id)
            elif current in TI_WAITING and (ti.next_retry_at is None or ti.next_retry_at <= now):
                state[ti.id] = TI.SCHEDULED
                decisions.add(TI.SCHEDULED, ti.id)
                decisions.retries.append(ti.id)
            continue
        limit = Limit.of(task, mine, run)
        for ti in mine:
            if state[ti.id] not in TI_WAITING:
                continue
            due = ti.next_retry_at is None or ti.next_retry_at <= now
            if due and limit.take():
                state[ti.id] = TI.SCHEDULED
                decisions.add(TI.SCHEDULED, ti.id)
                decisions.retries.append(ti.id)
        if task.get("map") is not None:
            decide_mapped(task, tasks, run, limit, decisions, max_map_length)
            continue
        for ti in mine:
            if state[ti.id] is not TI.NONE:
                continue
            new = verdict_state(task, tasks, run)
            if new is TI.SCHEDULED and not limit.take():
                continue
            if new is not None:
                state[ti.id] = new
                decisions.add(new, ti.id)
    return decisions


_CAP = "max_active_tis_per_dagrun"
