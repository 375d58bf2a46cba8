"""What every CLI command needs: settings, an engine, a session factory, errors."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from functools import cached_property

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, sessionmaker

from sluice.scheduler.control.inputs import InputError
from sluice.scheduler.core.db import make_engine, make_session_factory, utcnow
from sluice.scheduler.core.migrate import check_current
from sluice.scheduler.core.models import Dag, DagRun, TaskInstance
from sluice.scheduler.core.queries.ti_lookup import TiNotFound, find_task_instance
from sluice.scheduler.core.settings import Settings
from sluice.scheduler.scheduling.dagbag import sync_dag_folder


class CliError(InputError):
    """Bad input: printed as one line on stderr, exit code 2, nothing written."""


@dataclass
class Cli:
    settings: Settings
    role: str = "cli"

    @cached_property
    def engine(self) -> Engine:
        return make_engine(self.settings.database_url, application_name=f"sluice-{self.role}")

    @cached_property
    def factory(self) -> sessionmaker[Session]:
        check_current(self.engine)
        return make_session_factory(self.engine)

    def sync_dags(self) -> None:
        """Make the DAG files in the folder known (parses only what changed)."""
        sync_dag_folder(
            self.factory,
            self.settings.dags_folder,
            parse_timeout=self.settings.parse_timeout,
            now=utcnow(),
        )

    def get_dag(self, session: Session, dag_id: str) -> Dag:
        dag = session.get(Dag, dag_id)
        if dag is None or not dag.is_active:
            raise CliError(f"unknown DAG {dag_id!r} (not in {self.settings.dags_folder})")
        return dag

    def get_run(self, session: Session, dag_id: str, run_id: str) -> DagRun:
        self.get_dag(session, dag_id)
        run = session.scalar(select(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))
        if run is None:
            raise CliError(f"DAG {dag_id!r} has no run {run_id!r}")
        return run

    def get_ti(
        self,
        session: Session,
        dag_id: str,
        run_id: str,
        task_id: str,
        map_index: int | None = None,
    ) -> tuple[DagRun, TaskInstance]:
        """The run and its TI (a mapped task's named by `map_index`), or a CliError."""
        run = self.get_run(session, dag_id, run_id)
        try:
            ti = find_task_instance(session, run.id, task_id, map_index, named_by="--map-index")
        except TiNotFound as exc:
            raise CliError(f"run {run_id!r} of DAG {dag_id!r} {exc}") from None
        return run, ti


def iso(value: dt.datetime | None) -> str | None:
    return None if value is None else value.isoformat()
