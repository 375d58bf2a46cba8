"""What recording one finished try needs (`Case`), and what recording it did (`Recorded`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from sluice.scheduler.core.models import Dag
from sluice.scheduler.core.queries.task_logs import LogSnapshot
from sluice.scheduler.core.states import TI
from sluice.scheduler.scheduling.downstream import FollowUp
from sluice.scheduler.scheduling.plans import Plan


@dataclass(frozen=True)
class Case:
    """One try's result to record: the TI, its run and pool, the state and values to
    write, its log, and, when the worker decides the downstream, the plan for it."""

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
    decides: bool
    """The worker decides the direct downstream (publishing on, `schedule_after_task`,
    a success or a skip): otherwise every result wakes the schedulers."""
    tracing: bool
    """The TIs this result queues get their spans started (`spans.start_ti_spans`)."""
    plan: Plan | None
    """The plan of the decision when the worker reads the run for it (`decidable`)."""
    wide: Plan | None
    """The plan of a success into a fan-in too wide to read (`wide_fan_in`)."""
    every_index: bool = False
    """An index of a mapped task whose downstream waits for every index
    (`plans.waits_for_every_index`)."""

    @property
    def quiet_success(self) -> bool:
        """A success with no log to store, from the stored DAG: it may be one query."""
        return self.new is TI.SUCCESS and self.task_log is None and self.dag is not None

    @property
    def fan_in_plan(self) -> Plan | None:
        """The plan of a success into a fan-in that waits for all its upstreams."""
        plan = self.plan or self.wide
        return plan if plan is not None and plan.fan_in is not None else None


@dataclass(frozen=True)
class Recorded:
    """What recording a result did: whether its compare-and-set won, what follows
    (messages to publish, whether to wake the schedulers; None: the downstream was not
    looked at, wake them), the path that recorded it and the step that followed."""

    won: bool
    follow: FollowUp | None
    path: str
    then: str = ""
