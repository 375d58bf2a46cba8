"""What one worker process needs to run TaskInstances (`WorkerContext`), and where it
gets DAG objects from (`DagSource`).

A module of its own: the runner and the modules it calls (task logs, callbacks, the
embedded worker) all take a context, and none of them imports another for it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy.orm import Session, sessionmaker

from sluice.broker.wakeup import Waker
from sluice.broker.worker.result import Recorded
from sluice.scheduler.core.messages import RunMessage
from sluice.scheduler.core.settings import Settings


class DagSource(Protocol):
    """Where the worker gets DAG objects from (`tasks.loader.DagCache`).

    A source may also offer `get_spec(dag_id) -> dict`: the serialized DAG to use
    instead of the stored one (a local backfill runs the DAG as defined locally).
    """

    def get_dag(self, fileloc: str, dag_id: str) -> Any: ...


Publish = Callable[[Sequence[RunMessage]], None]


@dataclass
class WorkerContext:
    """What one worker process needs to run TaskInstances; built once per process.

    With `publish`, a successful or skipped try's direct downstream is decided and
    queued in its result transaction (`scheduler.decide.downstream`) and published through
    it after the commit; `trace_tis` activates the queued TIs' spans as the
    scheduler does. Without it (a local backfill), every result wakes the schedulers.
    """

    session_factory: sessionmaker[Session]
    dags: DagSource
    waker: Waker
    settings: Settings
    hostname: str
    pid: int
    publish: Publish | None = None
    trace_tis: bool = False
    observe: Callable[[Recorded], None] | None = None
    """Called with what recording each result did (its path): for tests and metrics."""
    deployment: str | None = None
    """The deployment this worker serves (`core.deployment`): messages of another are
    put back (`worker.task.refuse_a_strangers`)."""
