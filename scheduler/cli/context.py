"""What every CLI command needs: settings, an engine, a session factory, errors."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, sessionmaker

from sluice.scheduler.dagbag import sync_dag_folder
from sluice.scheduler.db import make_engine, make_session_factory, utcnow
from sluice.scheduler.migrate import check_current
from sluice.scheduler.models import Dag, DagRun
from sluice.scheduler.settings import Settings


class CliError(Exception):
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


def parse_date(text: str, what: str = "date") -> dt.datetime:
    """An ISO 8601 date or datetime; naive values are taken as UTC."""
    try:
        value = dt.datetime.fromisoformat(text)
    except ValueError:
        raise CliError(
            f"{what} {text!r} is not an ISO 8601 date (e.g. 2026-01-31T00:00:00Z)"
        ) from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value.astimezone(dt.UTC)


def parse_conf(text: str | None) -> dict[str, Any]:
    if text is None:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CliError(f"--conf is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise CliError("--conf must be a JSON object, e.g. '{\"key\": 1}'")
    return value


def iso(value: dt.datetime | None) -> str | None:
    return None if value is None else value.isoformat()
