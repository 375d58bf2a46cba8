"""Clearing task instances so they run again, as the CLI, the API and a backfill's
`--rerun-failed` ask it.

The functions take the caller's session and never commit. A cleared TI gets a new span
(new ids, `not_started`); its run, if it had finished, goes back to `queued` and its span is
continued by the next scheduler that drives it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from sluice.scheduler.core.models import Dag, DagRun, TaskInstance
from sluice.scheduler.core.states import TI, DagRunState, SpanStatus
from sluice.scheduler.core.tracing_ids import new_carrier, trace_id_of
from sluice.scheduler.core.transitions import move_run, move_spans, move_tis
from sluice.scheduler.scheduling.dagrun import verify_integrity
from sluice.tasks.mapping import per_index_of
from sluice.tasks.task_group import group_task_ids


class UnknownTask(LookupError):
    """A task id the DAG does not have; the message is one line for the user."""


class NotVersioned(ValueError):
    """A run that cannot move to another version (a folder bundle's always follows its
    DAG's current file); the message is one line for the user."""


def move_to_latest(session: Session, run: DagRun, latest: Dag, now: dt.datetime) -> None:
    """Move a git bundle's run to its DAG's latest version (`latest`, the stored row):
    its commit and version become the DAG's, and its TIs are brought in step as a folder
    run's are (`verify_integrity`: new tasks get TIs, vanished ones become `removed`).
    Invariant: the run's row is locked first (`FOR UPDATE`), in the caller's transaction."""
    if run.bundle_version is None or latest.bundle_version is None:
        raise NotVersioned(
            f"run {run.run_id!r} follows its DAG's current file (a folder bundle's): "
            "it has no version to move"
        )
    session.execute(select(DagRun.id).where(DagRun.id == run.id).with_for_update())
    verify_integrity(session, run, latest, now)
    session.execute(
        update(DagRun)
        .where(DagRun.id == run.id)
        .values(bundle_version=latest.bundle_version, dag_version_id=latest.version_id)
    )
    session.refresh(run)


def downstream_closure(spec: dict[str, Any], roots: Sequence[str]) -> set[str]:
    """`roots` and every task downstream of them in the serialized DAG `spec`."""
    seen: set[str] = set()
    stack = list(roots)
    while stack:
        task_id = stack.pop()
        if task_id in seen:
            continue
        seen.add(task_id)
        stack.extend(spec["tasks"].get(task_id, {}).get("downstream", []))
    return seen


def index_closure(spec: dict[str, Any], root: str, map_index: int) -> dict[str, int | None]:
    """What clearing index `map_index` of `root` with its downstream clears: task id →
    the one index to clear, or None for all its TIs. A task mapped one to one over a
    task cleared at index i is cleared at index i; any other downstream (a reduce, a
    task mapped over the whole output) as a whole, and so is everything after it."""
    tasks = spec["tasks"]
    chosen: dict[str, int | None] = {root: map_index}
    stack = [root]
    while stack:
        task_id = stack.pop()
        index = chosen[task_id]
        for child in tasks.get(task_id, {}).get("downstream", []):
            per_index = per_index_of(tasks.get(child, {}))
            wanted = index if index is not None and per_index == task_id else None
            if child not in chosen:
                chosen[child] = wanted
            elif chosen[child] is not None and chosen[child] != wanted:
                chosen[child] = None  # reached two ways: all of it
            else:
                continue
            stack.append(child)
    return chosen


@dataclass
class Cleared:
    """What `clear_task_instances` did: how many TIs it reset, and the external Celery
    tasks of the CeleryTask tries it cleared while they ran (to revoke after the commit,
    `revoke_external_tasks`)."""

    count: int = 0
    external_ids: list[str] = field(default_factory=list)


def groups_of(dag: Dag) -> dict[str, Any]:
    """The serialized DAG's task groups by id (``groups``; empty for a DAG without)."""
    return dict(dag.serialized.get("groups") or {})


def expand_groups(dag: Dag, task_ids: Collection[str] | None) -> set[str]:
    """`task_ids` with each task group's id replaced by the group's tasks (its nested
    groups' included; the serialized DAG's ``groups``). Raises UnknownTask for an id that
    is neither a task nor a group with tasks."""
    tasks = dag.serialized["tasks"]
    groups = dag.serialized.get("groups") or {}
    wanted: set[str] = set()
    for task_id in sorted(set(task_ids or [])):
        if task_id in tasks:
            wanted.add(task_id)
        elif task_id in groups:
            found = group_task_ids(groups, task_id)
            if not found:
                raise UnknownTask(f"task group {task_id!r} of DAG {dag.dag_id!r} has no tasks")
            wanted.update(found)
        else:
            raise UnknownTask(f"DAG {dag.dag_id!r} has no task {task_id!r}")
    return wanted


def clear_task_instances(
    session: Session,
    run: DagRun,
    dag: Dag,
    task_ids: Collection[str] | None,
    *,
    downstream: bool,
    now: dt.datetime,
    map_index: int | None = None,
) -> Cleared:
    """Reset the chosen TIs of `run` to `none` (all of them if `task_ids` is empty or None).
    With `map_index` (one task id): only that index of it, and with `downstream` only what
    depends on that index (`index_closure`). A task group's id stands for its tasks
    (`expand_groups`; with `map_index`, that index of each of them).

    Each cleared TI gets its retries again (`max_tries` counts from its current
    try), and the run goes back to `queued` so a scheduler picks it up. Raises
    UnknownTask, before writing anything, for a task the DAG does not have.
    Returns how many TIs moved and the external tasks of the running CeleryTask tries
    among them. Cleared TIs whose span was exported get new span ids; an exported run
    span is continued by the next scheduler.
    """
    tasks = dag.serialized["tasks"]
    wanted = expand_groups(dag, task_ids)
    indexes: dict[str, int | None] = {}
    if map_index is not None:
        for root in sorted(wanted):  # one task, or a group's tasks
            part = index_closure(dag.serialized, root, map_index) if downstream else {}
            for task_id, index in (part or {root: map_index}).items():
                if task_id in indexes and indexes[task_id] != index:
                    indexes[task_id] = None  # reached two ways: all of it
                else:
                    indexes.setdefault(task_id, index)
        wanted = set(indexes)
    elif wanted and downstream:
        wanted = downstream_closure(dag.serialized, sorted(wanted))
    # the run's row first, as every writer of a run's TIs takes it (no deadlock with a
    # worker writing a result under it)
    session.execute(select(DagRun.id).where(DagRun.id == run.id).with_for_update(key_share=True))
    tis = session.scalars(select(TaskInstance).where(TaskInstance.dag_run_id == run.id)).all()
    cleared = Cleared()
    for ti in tis:
        if (wanted and ti.task_id not in wanted) or ti.task_id not in tasks:
            continue  # a TI of a task its version no longer has stays `removed`
        index = indexes.get(ti.task_id)
        if index is not None and ti.map_index != index:
            continue
        retries = int(tasks.get(ti.task_id, {}).get("retries", 0))
        external = ti.external_id if ti.state == TI.RUNNING else None
        moved = move_tis(
            session,
            [ti.id],
            TI.NONE,
            expect=[s for s in TI if s is not TI.NONE],
            now=now,
            values={"max_tries": ti.try_number + retries + 1},
        )
        cleared.count += len(moved)
        if moved and external:
            cleared.external_ids.append(external)
        # a span already exported cannot be reopened: the next try gets new span ids
        move_spans(
            session,
            TaskInstance,
            [ti.id],
            SpanStatus.NOT_STARTED,
            expect=[SpanStatus.ENDED],
            values={"context_carrier": new_carrier(trace_id_of(run.context_carrier))},
        )
    move_run(
        session,
        run.id,
        DagRunState.QUEUED,
        expect=[DagRunState.SUCCESS, DagRunState.FAILED, DagRunState.RUNNING],
        now=now,
    )
    # an ended run span is continued ("… continued") by the next scheduler driving the run
    move_spans(session, DagRun, [run.id], SpanStatus.NEEDS_CONTINUANCE, expect=[SpanStatus.ENDED])
    return cleared
