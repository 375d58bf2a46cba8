"""What recording one finished try needs (`Case`) and what recording it did (`Recorded`),
in the words of the result paths: the facts a path is chosen by (`Shape`, `Kind`), the
paths (`Path`) and what follows a path's write (`Then`).

Every fact `paths.choose` reads is a field of `Case` fixed when it is made
(`paths.decision`), so choosing a path reads no database and takes no time worth
counting.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from sluice.scheduler.core.models import Dag
from sluice.scheduler.core.queries.assets import NewEvent, record_events
from sluice.scheduler.core.queries.task_logs import LogSnapshot
from sluice.scheduler.core.states import TI
from sluice.scheduler.decide.downstream import FollowUp
from sluice.scheduler.decide.plans import Plan


class Shape(StrEnum):
    """What the worker decides after a result, read from the finished task's DAG."""

    SCHEDULERS = "schedulers"
    """Nothing: the schedulers decide (decisions off, a failure or a retry, a task not
    run from the stored DAG, a run too wide to read that is no fan-in's)."""
    FAN_IN = "fan-in"
    """One downstream that waits for all its upstreams (`Plan.fan_in`)."""
    WIDE_FAN_IN = "wide fan-in"
    """The same, in a run too wide to read (more than READ_LIMIT TIs: `Plan.wide`)."""
    CHAIN = "chain link"
    """One downstream whose only upstream it is, in its pool (`Plan.chain_next`)."""
    FAN_OUT = "fan-out"
    """Several downstream whose only upstream it is, in its pool (`Plan.fan_out`)."""
    LEAF = "leaf"
    """No downstream (a run's last task, a branch's end)."""
    READ = "read"
    """Any other downstream the worker decides by reading the run's TIs (a branch, a
    downstream with other upstreams that does not wait for all of them, a skip)."""
    EVERY_INDEX = "every index"
    """One index of a mapped task whose downstream waits for every index
    (`plans.waits_for_every_index`)."""


READABLE = frozenset({Shape.FAN_IN, Shape.CHAIN, Shape.FAN_OUT, Shape.LEAF, Shape.READ})
"""The shapes whose plan the worker decides by (`decided` can decide any of them)."""


class Kind(StrEnum):
    """What the result is, as far as choosing its path goes."""

    QUIET_SUCCESS = "quiet success"
    """A success with no log nor asset event to store: it may be one query."""
    LOGGED_SUCCESS = "success with a log"
    """A success with a log or asset events to store (in the result's transaction)."""
    OTHER = "other"
    """A skip, a failure, a retry, a removal."""


class Path(StrEnum):
    """The ways a result is recorded (`paths.PATHS` says when and how)."""

    FAN_IN_AT_ONCE = "fan_in_at_once"
    CHAIN_AT_ONCE = "chain_at_once"
    FAN_OUT_AT_ONCE = "fan_out_at_once"
    LEAF_AT_ONCE = "leaf_at_once"
    DECIDED = "decided"
    INDEX_AT_ONCE = "index_at_once"
    INDEX_WRITTEN = "index_written"
    WRITTEN = "written"


class Then(StrEnum):
    """What followed a path's write (logged after the path: `fan_in_at_once, then fill`)."""

    NOTHING = "nothing"
    """Nothing to do: another upstream (or index, or TI of the run) is unfinished and no
    TI waits for the freed slot, or none fitted."""
    QUEUED = "queued"
    """The downstream went out with the result's own query."""
    WAITING = "waiting"
    """Some downstream wait in the pool behind other runs' TIs (given freed slots by
    priority)."""
    FILLED = "filled"
    """The freed slot given to the first TI waiting in the pool, in the result's query."""
    FILL = "fill"
    """The same, in one more query (with spans to start, a transaction)."""
    FILL_AND_WAKE = "fill and wake"
    """A fill, and the schedulers woken: the run's last unfinished TI."""
    JOIN = "join"
    """A fan-in's last upstream: the fan-in queued (or scheduled) by one more query."""
    DECIDE = "decide"
    """The downstream decided in a transaction of its own under the run's lock."""
    WAKE = "wake"
    """The schedulers decide (woken naming the run)."""


@dataclass(frozen=True)
class Case:
    """One try's result to record: the TI, its run and pool, the state and values to
    write, its log, and what the worker decides after it (`shape`, by `plan`)."""

    factory: sessionmaker[Session]
    ti_id: int
    attempt_id: str
    task_id: str
    run_pk: int
    pool: str
    dag: Dag | None
    """The DAG row the task was run from (None: not from the stored DAG)."""
    new: TI
    values: dict[str, Any]
    task_log: LogSnapshot | None
    tracing: bool
    """The TIs this result queues get their spans started (`spans.start_ti_spans`)."""
    shape: Shape
    plan: Plan | None
    """The plan of the decision: set for the READABLE shapes and WIDE_FAN_IN, else None."""
    asset_events: tuple[NewEvent, ...] = ()
    """A success's asset events (the task's outlets), written with it if its
    compare-and-set wins (`store_asset_events`)."""

    @property
    def kind(self) -> Kind:
        if self.new is not TI.SUCCESS:
            return Kind.OTHER
        if self.task_log is None and not self.asset_events:
            return Kind.QUIET_SUCCESS
        return Kind.LOGGED_SUCCESS


def store_asset_events(session: Session, case: Case, now: dt.datetime) -> None:
    """Write `case`'s asset events, in the transaction whose compare-and-set of its
    result just won (each queued for the DAGs that consume its asset)."""
    if case.asset_events:
        record_events(session, case.asset_events, now)


@dataclass(frozen=True)
class Recorded:
    """What recording a result did: whether its compare-and-set won, what follows
    (messages to publish, whether to wake the schedulers; None: the downstream was not
    looked at, wake them), the path that recorded it and the step that followed (which
    `failed` when a dropped connection left it to the schedulers)."""

    won: bool
    follow: FollowUp | None
    path: Path
    then: Then | None = None
    failed: bool = False

    @property
    def via(self) -> str:
        """The path and its step, as the worker logs them: `chain_at_once, then queued`."""
        if self.then is None:
            return str(self.path)
        return f"{self.path}, then {self.then}{' failed: wake' if self.failed else ''}"
