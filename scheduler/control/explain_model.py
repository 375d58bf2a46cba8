"""The vocabulary of `sluice tasks explain`: what a reason is, what an answer holds, and
the `Subject` every reason builder reads (`explain_reasons`, `explain_limits`)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from sqlalchemy.orm import Session

from sluice.scheduler.core.models import Dag, DagRun, TaskInstance
from sluice.scheduler.core.settings import Settings
from sluice.scheduler.decide.decisions import TiView


class ReasonKind(StrEnum):
    """What a reason is about; the `kind` field of `--json`."""

    RUN_NOT_RUNNING = "run_not_running"
    DAG_PAUSED = "dag_paused"
    MAX_ACTIVE_RUNS = "max_active_runs"
    RUN_CLAIMED = "run_claimed"
    REMOVED = "removed"
    NOT_CREATED = "not_created"
    UPSTREAM = "upstream"
    TRIGGER_RULE = "trigger_rule"
    BRANCH_NOT_CHOSEN = "branch_not_chosen"
    POOL_MISSING = "pool_missing"
    POOL_TOO_SMALL = "pool_too_small"
    POOL_FULL = "pool_full"
    MAX_ACTIVE_TASKS = "max_active_tasks"
    CONCURRENCY_FULL = "concurrency_full"
    """Every slot of the TI's concurrency key is held (`sluice.Concurrency`)."""
    RATE_LIMITED = "rate_limited"
    """The TI's rate limit has no token left (`sluice.RateLimit`)."""
    READY = "ready"
    NO_SCHEDULER = "no_scheduler"
    QUEUED = "queued"
    NO_WORKER = "no_worker"
    RUNNING = "running"
    HEARTBEAT_STOPPED = "heartbeat_stopped"
    RETRY = "retry"
    RESCHEDULE = "reschedule"
    """A reschedule-mode sensor between two pokes: when its next poke is due."""
    DEFERRED = "deferred"
    """A deferred TI: what its trigger waits for, until when, and who runs it."""
    FINISHED = "finished"
    SKIPPED_ITSELF = "skipped_itself"
    OPERATOR = "operator"
    """A user's operation on the TI or its run (cancel, mark), from the audit log."""
    NOTE = "note"
    """A note a user left on the TI or its run."""


@dataclass
class Reason:
    """One fact behind a state. `blocking`: it is (part of) what holds the TI now."""

    kind: ReasonKind
    detail: str
    blocking: bool = True
    data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": str(self.kind),
            "detail": self.detail,
            "blocking": self.blocking,
            **self.data,
        }


@dataclass
class Explanation:
    dag_id: str
    run_id: str
    task_id: str
    state: str
    run_state: str
    try_number: int
    max_tries: int
    queue: str
    pool: str
    summary: str
    reasons: list[Reason]
    notes: list[str] = field(default_factory=list)
    map_index: int | None = None
    """The index of a mapped task's TI; None when the task is not mapped."""

    def kinds(self) -> list[str]:
        return [str(r.kind) for r in self.reasons]

    def reason(self, kind: ReasonKind) -> Reason | None:
        return next((r for r in self.reasons if r.kind is kind), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "dag_id": self.dag_id,
            "run_id": self.run_id,
            "task_id": self.task_id,
            "map_index": self.map_index,
            "state": self.state,
            "run_state": self.run_state,
            "try_number": self.try_number,
            "max_tries": self.max_tries,
            "queue": self.queue,
            "pool": self.pool,
            "summary": self.summary,
            "reasons": [r.to_dict() for r in self.reasons],
            "notes": list(self.notes),
        }


class ExplainError(LookupError):
    """The DAG, run or task asked about does not exist."""


@dataclass
class Subject:
    """Everything the reason builders read about the TI, loaded once."""

    session: Session
    now: dt.datetime
    settings: Settings
    dag: Dag
    run: DagRun
    ti: TaskInstance | None
    task_id: str
    tis: list[TiView]
    workers: dict[str, list[str]] | None

    @property
    def task(self) -> dict[str, Any] | None:
        task: dict[str, Any] | None = self.dag.serialized["tasks"].get(self.task_id)
        return task


def duration(seconds: float) -> str:
    """A short human duration: 42s, 3m 5s, 2h 10m, 3d 4h."""
    s = int(round(abs(seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60}s"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60}m"
    return f"{s // 86400}d {s % 86400 // 3600}h"


def iso(value: dt.datetime | None) -> str | None:
    return None if value is None else value.isoformat()
