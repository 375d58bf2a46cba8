"""A small world for operator tests: DAG files synced, runs created, states moved.

Everything goes through the application's own functions: `sync_dag_folder`,
`create_dagrun`, `move_run`, `move_ti`, `queue_tis`, `update_state`, and a
scheduler job's `register()`. No row is written by hand except pool rows.
"""

from __future__ import annotations

import datetime as dt
import textwrap
import uuid
from pathlib import Path
from typing import Any

from sqlalchemy import select

from sluice.broker.wakeup import LocalWaker
from sluice.scheduler.control.explain import Explanation, explain_ti
from sluice.scheduler.core.db import make_engine, make_session_factory, transaction, utcnow
from sluice.scheduler.core.models import Dag, DagRun, Pool, TaskInstance
from sluice.scheduler.core.settings import Settings
from sluice.scheduler.core.states import TI, DagRunState, RunType
from sluice.scheduler.core.transitions import move_run, move_ti, queue_tis
from sluice.scheduler.scheduling.dagbag import sync_dag_folder
from sluice.scheduler.scheduling.dagrun import RunDecision, create_dagrun, update_state

HEADER = "from datetime import timedelta\nfrom sluice import DAG, Skip, TriggerRule, task\n"

# The moves a TI makes to reach each state from `none`, as the scheduler and a worker do.
PATHS: dict[TI, list[TI]] = {
    TI.SCHEDULED: [TI.SCHEDULED],
    TI.QUEUED: [TI.SCHEDULED, TI.QUEUED],
    TI.RUNNING: [TI.SCHEDULED, TI.QUEUED, TI.RUNNING],
    TI.SUCCESS: [TI.SCHEDULED, TI.QUEUED, TI.RUNNING, TI.SUCCESS],
    TI.FAILED: [TI.SCHEDULED, TI.QUEUED, TI.RUNNING, TI.FAILED],
    TI.UP_FOR_RETRY: [TI.SCHEDULED, TI.QUEUED, TI.RUNNING, TI.UP_FOR_RETRY],
    TI.UP_FOR_RESCHEDULE: [TI.SCHEDULED, TI.QUEUED, TI.RUNNING, TI.UP_FOR_RESCHEDULE],
    TI.SKIPPED: [TI.SCHEDULED, TI.QUEUED, TI.RUNNING, TI.SKIPPED],
}


class World:
    def __init__(self, url: str, folder: Path, **settings: Any) -> None:
        self.engine = make_engine(url)
        self.factory = make_session_factory(self.engine)
        self.folder = folder
        self.settings = Settings(database_url=url, dags_folder=folder, **settings)
        self.now = utcnow()
        self._runs = 0

    def close(self) -> None:
        self.engine.dispose()

    # -- building ----------------------------------------------------------------------------
    def dags(self, body: str, name: str = "dags") -> None:
        """Write a DAG file (header + dedented body) and sync the folder into the database."""
        path = self.folder / f"{name}.py"
        path.write_text(HEADER + textwrap.dedent(body))
        result = sync_dag_folder(self.factory, self.folder, parse_timeout=20, now=self.now)
        assert not result.errors, result.errors

    def pool(self, name: str, slots: int) -> None:
        with transaction(self.factory) as session:
            session.add(Pool(name=name, slots=slots))

    def trigger(self, dag_id: str, run_id: str, *, start: bool = True) -> None:
        with transaction(self.factory) as session:
            dag = session.get(Dag, dag_id)
            assert dag is not None
            self._runs += 1
            logical = self.now + dt.timedelta(seconds=self._runs)
            run = create_dagrun(
                session,
                dag,
                run_type=RunType.MANUAL,
                logical_date=logical,
                now=self.now,
                run_id=run_id,
            )
            if start:
                assert move_run(
                    session, run.id, DagRunState.RUNNING, expect=[DagRunState.QUEUED], now=self.now
                )

    def ti(self, dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> TaskInstance:
        with self.factory() as session:
            ti = session.scalar(
                select(TaskInstance).where(
                    TaskInstance.dag_id == dag_id,
                    TaskInstance.run_id == run_id,
                    TaskInstance.task_id == task_id,
                    TaskInstance.map_index == map_index,
                )
            )
            assert ti is not None
            return ti

    def advance(
        self,
        dag_id: str,
        run_id: str,
        task_id: str,
        to: TI,
        *,
        at: dt.datetime | None = None,
        map_index: int = -1,
        **values: Any,
    ) -> TaskInstance:
        """Walk the TI (of `map_index`, for a mapped task's index) from its state to `to` at
        time `at`; `values` go with the last move."""
        ti = self.ti(dag_id, run_id, task_id, map_index)
        path = PATHS[to]
        if ti.state in path:  # already part of the way there (e.g. scheduled by a decision)
            path = path[path.index(TI(ti.state)) + 1 :]
        now = at or self.now
        with transaction(self.factory) as session:
            state = TI(ti.state)
            attempt = ti.attempt_id
            for i, new in enumerate(path):
                last = i == len(path) - 1
                if new is TI.QUEUED:
                    attempt = str(uuid.uuid4())
                    queue_tis(session, [(ti.id, attempt)], now=now, job_id=None)
                else:
                    extra = dict(values) if last else {}
                    if new is TI.RUNNING:
                        extra.setdefault("hostname", "worker-host")
                        extra.setdefault("pid", 4242)
                    moved = move_ti(
                        session,
                        ti.id,
                        new,
                        expect=[state],
                        now=now,
                        attempt_id=attempt if state in (TI.QUEUED, TI.RUNNING) else None,
                        values=extra,
                    )
                    assert moved, f"{task_id}: {state} -> {new} did not move"
                state = new
        return self.ti(dag_id, run_id, task_id, map_index)

    def decide(self, dag_id: str, run_id: str) -> RunDecision:
        """One scheduling decision of the run, as the scheduler makes it (row locked)."""
        with transaction(self.factory) as session:
            run = session.scalar(
                select(DagRun)
                .where(DagRun.dag_id == dag_id, DagRun.run_id == run_id)
                .with_for_update()
            )
            dag = session.get(Dag, dag_id)
            assert run is not None and dag is not None
            return update_state(
                session, run, dag, self.now, max_map_length=self.settings.max_map_length
            )

    def scheduler_job(self) -> int:
        from sluice.scheduler.jobs.scheduler_job import SchedulerJob

        job = SchedulerJob(
            self.settings, self.factory, lambda m: None, LocalWaker(), clock=lambda: self.now
        )
        return job.register()

    # -- explaining --------------------------------------------------------------------------
    def explain(
        self,
        dag_id: str,
        run_id: str,
        task_id: str,
        workers: dict[str, list[str]] | None = None,
        at: dt.datetime | None = None,
        map_index: int | None = None,
    ) -> Explanation:
        with self.factory() as session:
            return explain_ti(
                session,
                dag_id,
                run_id,
                task_id,
                at or self.now,
                workers_by_queue=workers,
                settings=self.settings,
                map_index=map_index,
            )
