"""What deciding a finished task's downstream needs, from the DAG alone: its `Plan`.

A plan is plain data (task ids, pool names, flags; no SQL objects), worked out once per
DAG version, task, pool and outcome and cached. The statements that carry it out are in
`downstream_sql`; the worker's result paths that use it are in `sluice.broker.worker.result`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from sluice.scheduler.core.models import Dag
from sluice.scheduler.core.states import TI, TaskInstanceState
from sluice.scheduler.decide.deps import upstream_counts
from sluice.scheduler.decide.per_version import PerVersion
from sluice.tasks.mapping import per_index_of
from sluice.tasks.trigger_rules import TriggerRule, Verdict, decide

READ_LIMIT = 256
"""Most TIs a worker reads to decide a downstream. Beyond it (the 10,000-way fan-in of a
big DAG's join, read again on each of its upstreams' results) the schedulers decide:
their passes coalesce the wake-ups of many results into one read of the run."""

FILL_LIMIT = 16
"""Most waiting TIs one worker result queues by priority (more: a scheduler pass)."""

FEW = 16
"""Up to this many TIs to read, they are named; beyond it (in a DAG of at most
READ_LIMIT tasks) the whole run is read."""

WAITS_FOR_ALL = frozenset(
    {
        TriggerRule.ALL_SUCCESS,
        TriggerRule.ALL_DONE,
        TriggerRule.NONE_FAILED,
        TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS,
        TriggerRule.NONE_SKIPPED,
        TriggerRule.ONE_FAILED,
    }
)
"""Rules under which one more successful upstream changes nothing while another is
unfinished: any earlier verdict comes from the other upstreams' states (whose results
decided it, or woke a scheduler to)."""


class Counted(StrEnum):
    """How a fan-in's other upstreams are named in the result's UPDATE that counts those
    still unfinished: by their names, or as every TI of the run but a named few (a wide
    fan-in, where those few are the shorter list)."""

    OTHERS = "others"
    ALL_BUT = "all_but"


@dataclass(frozen=True)
class FanIn:
    """A success into one fan-in that waits for all its upstreams: how the result's
    UPDATE counts the others still unfinished (`counted`, over `names`)."""

    counted: Counted
    names: tuple[str, ...]


@dataclass(frozen=True)
class Plan:
    """What deciding a task's downstream needs, from the DAG alone (cached per DAG
    version, task, pool and outcome)."""

    downstream: tuple[str, ...]
    needed: frozenset[str]
    """The task, its direct downstream and their upstreams (empty for a wide plan)."""
    read_ids: tuple[str, ...]
    """The task ids the result's read names (sorted `needed`)."""
    branches: tuple[str, ...]
    """The branch tasks among `needed`: their results (choices) are read."""
    pools: tuple[str, ...]
    """The task's pool and its downstream's, sorted."""
    whole_run: bool
    """Read every TI of the run instead of naming `read_ids` (a small DAG, many ids)."""
    locks_pool: bool
    """A success makes every downstream ready (this task is their only upstream) and they
    share this task's pool: the result's read locks that pool's row."""
    fan_in: FanIn | None
    """For a success into one fan-in that waits for all its upstreams."""
    chain_next: str | None = None
    """For a success whose one downstream has this task as its only upstream, in the same
    pool, and runs after it (its trigger rule's verdict on one success), this task not a
    branch: that downstream, ready once the result is written. Never a task with a rate
    limit (nor `join_next`, `fan_out`): a scheduler's pass takes its token."""
    join_next: str | None = None
    """For a success into one all_success fan-in in this task's pool, no upstream a
    branch: that fan-in, which its last upstream queues by one query after its result
    when every upstream succeeded and it fits."""
    fan_out: tuple[str, ...] | None = None
    """For a success whose several downstream (fewer than FILL_LIMIT) each have this task as
    their only upstream, share its pool and run after it (their trigger rules' verdict on
    one success), this task not a branch: those downstream, ready once the result is
    written, scheduled and queued by priority in the result's own query."""
    wide: bool = False
    """More than READ_LIMIT TIs to read, but a success into a fan-in (`fan_in`): its
    result's write says whether other upstreams are unfinished, without reading them;
    after the last one, the fan-in is queued by one query when it may be, else decided by
    the schedulers (they read the run)."""


_PLANS_SIZE = 4096
_PLANS: PerVersion[tuple[str, str, str, bool], Plan | None] = PerVersion(_PLANS_SIZE)


def _plan(dag: Dag, task_id: str, pool: str, success: bool) -> Plan | None:
    """The cached `Plan`; None for more than READ_LIMIT TIs to read."""
    version = dag.version_hash
    return _PLANS.get(
        (version, task_id, pool, success),
        lambda: _make_plan(version, dag.serialized["tasks"], task_id, pool, success),
    )


@dataclass(frozen=True)
class _Join:
    """What every upstream's plan needs of one downstream, worked out once per DAG version
    (a fan-in of 10,000 upstreams has 10,000 plans)."""

    upstream: frozenset[str]
    not_upstream: tuple[str, ...]
    """The DAG's other tasks, sorted (the fan-in itself among them)."""
    branch_upstream: bool


_JOINS: PerVersion[tuple[str, str], _Join] = PerVersion(_PLANS_SIZE)


def _join(version: str, tasks: Mapping[str, Any], down: str) -> _Join:
    def make() -> _Join:
        up = frozenset(tasks[down]["upstream"])
        branchy = any(tasks[u].get("is_branch") for u in up)
        return _Join(up, tuple(sorted(set(tasks) - up)), branchy)

    return _JOINS.get((version, down), make)


def _make_plan(
    version: str, tasks: Mapping[str, Any], task_id: str, pool: str, success: bool
) -> Plan | None:
    downstream = tuple(tasks.get(task_id, {}).get("downstream", []))
    if _touches_mapping(version, tasks, task_id, downstream):
        return None
    join = _join(version, tasks, downstream[0]) if len(downstream) == 1 else None
    if join is not None:
        size = (
            len(join.upstream)
            + (task_id not in join.upstream)
            + (downstream[0] not in join.upstream)
        )
        needed: set[str] = set()
    else:
        needed = {task_id, *downstream}
        for down in downstream:
            needed.update(tasks[down]["upstream"])
        size = len(needed)
    pools = tuple(sorted({pool} | {tasks[d].get("pool") or pool for d in downstream}))
    fan_in = _fan_in(tasks, task_id, downstream[0], join) if success and join else None
    rated = any("rate_limit" in tasks[d] for d in downstream)  # a scheduler takes tokens
    join_next = (
        _join_next(tasks, task_id, downstream, pools, join)
        if fan_in and join and not rated
        else None
    )
    if size > READ_LIMIT:  # a wide fan-out or fan-in: one scheduler pass decides
        if fan_in is None:
            return None
        return Plan(
            downstream,
            frozenset(),
            (),
            (),
            pools,
            False,
            False,
            fan_in,
            None,
            join_next,
            wide=True,
        )
    if join is not None:
        needed = {task_id, *downstream, *join.upstream}
    branches = tuple(sorted(t for t in needed if tasks[t].get("is_branch")))
    whole_run = len(needed) > FEW and len(tasks) <= READ_LIMIT
    locks_pool = (
        success
        and len(pools) == 1
        and bool(downstream)
        and all(tasks[d]["upstream"] == [task_id] for d in downstream)
    )
    chain_next = fan_out = None
    queues_at_once = locks_pool and not rated and not tasks[task_id].get("is_branch")
    if queues_at_once and _run_on_success(tasks, downstream):
        if len(downstream) == 1:
            chain_next = downstream[0]
        elif len(downstream) < FILL_LIMIT:
            fan_out = downstream
    return Plan(
        downstream,
        frozenset(needed),
        tuple(sorted(needed)),
        branches,
        pools,
        whole_run,
        locks_pool,
        fan_in,
        chain_next,
        join_next,
        fan_out,
    )


def _run_on_success(tasks: Mapping[str, Any], downstream: tuple[str, ...]) -> bool:
    """Whether every task of `downstream` runs once its one upstream succeeded."""
    once = upstream_counts([TI.SUCCESS])
    return all(
        decide(TriggerRule(tasks[d]["trigger_rule"]), once) is Verdict.RUN for d in downstream
    )


def _touches_mapping(
    version: str, tasks: Mapping[str, Any], task_id: str, downstream: tuple[str, ...]
) -> bool:
    """Whether the task is mapped, or a downstream is, or has a mapped upstream: then its
    result's consequences are counted over indexes (or expand a task) and a scheduler
    decides them (`scheduling.mapped`)."""
    touched = _mapping_touched(version, tasks)
    return task_id in touched.mapped or any(d in touched.near_mapped for d in downstream)


@dataclass(frozen=True)
class _Touched:
    mapped: frozenset[str]
    near_mapped: frozenset[str]
    """Tasks that are mapped or have a mapped upstream."""


_TOUCHED: PerVersion[str, _Touched] = PerVersion(_PLANS_SIZE)


def _mapping_touched(version: str, tasks: Mapping[str, Any]) -> _Touched:
    """The mapped tasks of a DAG version and those next to them, worked out once (a plan
    is made for each of a 10,000-way fan-in's upstreams: scanning the fan-in's upstreams
    for each would be quadratic)."""

    def make() -> _Touched:
        mapped = frozenset(t for t, spec in tasks.items() if spec.get("map") is not None)
        near = {t for t, spec in tasks.items() if any(u in mapped for u in spec["upstream"])}
        return _Touched(mapped, mapped | frozenset(near))

    return _TOUCHED.get(version, make)


def _join_next(
    tasks: Mapping[str, Any],
    task_id: str,
    downstream: tuple[str, ...],
    pools: tuple[str, ...],
    join: _Join,
) -> str | None:
    """`Plan.join_next`: the one downstream, if its rule is all_success, it shares the
    task's pool and none of its upstreams is a branch (whose choice could skip it)."""
    if len(pools) != 1 or join.branch_upstream or tasks[task_id].get("is_branch"):
        return None
    if TriggerRule(tasks[downstream[0]]["trigger_rule"]) is not TriggerRule.ALL_SUCCESS:
        return None
    return downstream[0]


def _fan_in(tasks: Mapping[str, Any], task_id: str, down: str, join: _Join) -> FanIn | None:
    """If `task_id`'s success cannot decide `down` while another upstream of it is
    unfinished: how the result's UPDATE counts those. Never for a branch task: its choice
    may skip `down` at once, whatever the others' states (a pass does)."""
    others = len(join.upstream) - (task_id in join.upstream)
    if not others or TriggerRule(tasks[down]["trigger_rule"]) not in WAITS_FOR_ALL:
        return None
    if tasks[task_id].get("is_branch"):
        return None
    if others <= len(tasks) - others:
        return FanIn(Counted.OTHERS, tuple(sorted(join.upstream - {task_id})))
    # a wide fan-in: name the few that are not (the task among them)
    return FanIn(Counted.ALL_BUT, tuple(sorted({*join.not_upstream, task_id})))


def decidable(dag: Dag | None, task_id: str, pool: str, finished: TaskInstanceState) -> Plan | None:
    """The plan of deciding `task_id`'s downstream after `finished` from `dag` (the
    DAG row the worker ran it from); None if a worker does not decide it (no DAG row,
    more than READ_LIMIT TIs to read)."""
    if dag is None or not dag.serialized:
        return None
    plan = _plan(dag, task_id, pool, finished is TI.SUCCESS)
    return None if plan is None or plan.wide else plan


def wide_fan_in(
    dag: Dag | None, task_id: str, pool: str, finished: TaskInstanceState
) -> Plan | None:
    """For a success into a fan-in too wide for `decidable`: the plan of its result's
    write that says whether other upstreams are unfinished (`Plan.wide`); else None."""
    if dag is None or not dag.serialized or finished is not TI.SUCCESS:
        return None
    plan = _plan(dag, task_id, pool, True)
    return plan if plan is not None and plan.wide else None


_EVERY_INDEX: PerVersion[tuple[str, str], bool] = PerVersion(_PLANS_SIZE)


def waits_for_every_index(dag: Dag | None, task_id: str) -> bool:
    """Whether a success of one index of mapped task `task_id` decides nothing while
    another of its indexes is unfinished: every direct downstream waits for all its
    upstreams (`WAITS_FOR_ALL`) and none follows its indexes one to one (cached per DAG
    version)."""
    if dag is None or not dag.serialized:
        return False

    def make() -> bool:
        tasks = dag.serialized["tasks"]
        task = tasks.get(task_id, {})
        return task.get("map") is not None and all(
            TriggerRule(tasks[d]["trigger_rule"]) in WAITS_FOR_ALL
            and per_index_of(tasks[d]) != task_id
            for d in task.get("downstream", [])
        )

    return _EVERY_INDEX.get((dag.version_hash, task_id), make)


_ARGUMENTS: PerVersion[tuple[str, str], tuple[str, ...] | None] = PerVersion(_PLANS_SIZE)


def arguments_upstream(dag: Dag, task_id: str) -> tuple[str, ...] | None:
    """The upstream task ids of `task_id` if its call or mapped arguments take upstream
    results (`{"$upstream": …}` in its serialized `call` or `map`), sorted; else None
    (cached per DAG version)."""

    def make() -> tuple[str, ...] | None:
        task = dag.serialized.get("tasks", {}).get(task_id)
        takes = task is not None and '"$upstream"' in json.dumps(
            [task.get("call"), task.get("map")]
        )
        return tuple(sorted(task["upstream"])) if takes and task else None

    return _ARGUMENTS.get((dag.version_hash, task_id), make)
