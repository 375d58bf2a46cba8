"""What every CLI command needs: settings, an engine, a session factory, errors."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TypeVar

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, sessionmaker

from sluice.scheduler.control.inputs import InputError
from sluice.scheduler.core.bundles import bundles_of
from sluice.scheduler.core.db import make_engine, make_session_factory, utcnow
from sluice.scheduler.core.db_wait import until_reachable, wait_for_database
from sluice.scheduler.core.migrate import check_current
from sluice.scheduler.core.models import Dag, DagRun, TaskInstance
from sluice.scheduler.core.queries.import_errors import why_missing
from sluice.scheduler.core.queries.ti_lookup import TiNotFound, find_task_instance
from sluice.scheduler.core.settings import Settings
from sluice.scheduler.scheduling.bundle_sync import sync_bundles

T = TypeVar("T")


class CliError(InputError):
    """Bad input: printed as one line on stderr, exit code 2, nothing written."""


@dataclass
class Cli:
    settings: Settings
    role: str = "cli"
    schema_checked: bool = False
    """`wait_for_database` found the current schema (`factory` does not check again)."""

    @cached_property
    def engine(self) -> Engine:
        return make_engine(
            self.settings.database_url,
            application_name=f"sluice-{self.role}",
            idle_in_transaction_timeout=self.settings.db_idle_in_tx_timeout,
        )

    @cached_property
    def factory(self) -> sessionmaker[Session]:
        if not self.schema_checked:
            check_current(self.engine)
        return make_session_factory(self.engine)

    def dags_folder(self) -> Path:
        """The DAGs folder; a CliError naming it if it is not there (checked before a
        command that reads it writes anything)."""
        folder = self.settings.dags_folder
        if folder.is_dir():
            return folder
        what = "is not a folder" if folder.exists() else "does not exist"
        shown = str(folder) if folder.is_absolute() else f"{folder} ({folder.resolve()})"
        raise CliError(
            f"the DAGs folder {shown} {what}: set SLUICE_DAGS_FOLDER to the folder of your "
            "DAG files"
        )

    def check_bundles(self) -> None:
        """The DAGs folder (without SLUICE_DAG_BUNDLES), or each folder bundle's folder:
        a CliError naming the first that is not there. A git bundle is fetched later (a
        remote that cannot be reached is the schedulers' business, `sluice status`)."""
        if self.settings.dag_bundles is None:
            self.dags_folder()
            return
        for bundle in self.settings.dag_bundles:
            if bundle.path is not None and not bundle.path.is_dir():
                raise CliError(
                    f"the folder {bundle.path} of DAG bundle {bundle.name!r} is not there: "
                    "fix its path in SLUICE_DAG_BUNDLES"
                )

    def sync_dags(self) -> None:
        """Make the DAG files of every bundle known (parses only what changed; a git
        bundle whose fetch fails keeps its last commit, as a scheduler does)."""
        self.check_bundles()  # a folder that is not there is refused
        sync_bundles(self.factory, self.settings, bundles_of(self.settings), now=utcnow())

    def wait_for_database(self) -> None:
        """For a daemon at start: wait until the database answers, one line per failed
        attempt, backing off (`SLUICE_DB_RETRY_DELAY`, `SLUICE_DB_RETRY_MAX_DELAY`)."""
        wait_for_database(self.engine, self.settings)
        self.schema_checked = True

    def at_start(self, step: Callable[[], T]) -> T:
        """A daemon's start-up read, tried again as `wait_for_database` waits while the
        database drops the connection (a restart, a terminated backend): a daemon that
        waited for its database does not then die of one dropped connection."""
        return until_reachable(self.engine, self.settings, step)[0]

    def unknown_dag(self, session: Session, dag_id: str) -> CliError:
        """The error for a DAG id that is not there, naming the DAG files that failed."""
        folder = self.settings.dags_folder
        local = folder if folder.is_dir() else None
        why = why_missing(session, dag_id, folder=local, read_files=local is not None)
        return CliError(f"unknown DAG {dag_id!r} (not in {folder}){why}")

    def get_dag(self, session: Session, dag_id: str) -> Dag:
        dag = session.get(Dag, dag_id)
        if dag is None or not dag.is_active:
            raise self.unknown_dag(session, dag_id)
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
