"""Fixtures of the API tests: a seeded PostgreSQL database and a TestClient on it.

The DAGs are made the way users make them: DAG files in a folder, synced into
a database by `scheduler.scheduling.dagbag.sync_dag_folder`, as the CLI and schedulers do
(once per session; each test gets a copy of the rows in its own database).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from sluice.scheduler.api import create_app
from sluice.scheduler.api.config import ApiConfig
from sluice.scheduler.core.db import make_engine, make_session_factory, transaction, utcnow
from sluice.scheduler.core.migrate import upgrade
from sluice.scheduler.core.models import Dag, DagFile
from sluice.scheduler.core.settings import Settings
from sluice.scheduler.scheduling.dagbag import sync_dag_folder

TOKEN = "test-token-7"
AUTH = {"Authorization": f"Bearer {TOKEN}"}

DEMO_DAG = """
import datetime
import logging

from sluice import DAG, task

START = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)

with DAG("demo", schedule="@daily", catchup=False, start_date=START) as dag:
    @task
    def extract(context):
        print("extracting for", context["run_id"])
        return 3

    @task(retries=1)
    def transform(context):
        logging.getLogger("demo.transform").warning("transforming %s", context["upstream"])
        return 4

    @task
    def load():
        print("loaded")

    @task
    def audit():
        return None

    extract >> transform >> load
    extract >> audit
"""

MANUAL_DAG = """
from sluice import DAG, task

with DAG("manual_only", schedule=None) as dag:
    @task
    def only():
        return 1
"""

BROKEN_DAG = "from sluice import DAG\nraise ImportError('this dag file is broken')\n"


def write_dags(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "demo_dag.py").write_text(DEMO_DAG)
    (folder / "manual_dag.py").write_text(MANUAL_DAG)
    (folder / "broken_dag.py").write_text(BROKEN_DAG)


@pytest.fixture(scope="session")
def parsed_dags(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    """The `dag` and `dag_file` rows that syncing the test DAG files gives, made once.

    Parsing costs a subprocess; each test copies these rows into its own database.
    """
    root = tmp_path_factory.mktemp("parsed")
    write_dags(root / "dags")
    engine = make_engine(f"sqlite:///{root / 'parse.db'}")
    try:
        upgrade(engine)
        factory = make_session_factory(engine)
        sync_dag_folder(factory, root / "dags", parse_timeout=20, now=utcnow())
        with factory() as session:
            return {
                "dag": [_columns(row) for row in session.scalars(select(Dag))],
                "dag_file": [_columns(row) for row in session.scalars(select(DagFile))],
            }
    finally:
        engine.dispose()


def _columns(row: Any) -> dict[str, Any]:
    return {c.key: getattr(row, c.key) for c in row.__table__.columns}


def add_parsed_dags(url: str, parsed_dags: dict[str, list[dict[str, Any]]]) -> None:
    """Write the parsed test DAGs (their `dag` and `dag_file` rows) into the database."""
    engine = make_engine(url)
    try:
        with transaction(make_session_factory(engine)) as session:
            session.add_all(Dag(**row) for row in parsed_dags["dag"])
            session.add_all(DagFile(**row) for row in parsed_dags["dag_file"])
    finally:
        engine.dispose()


@pytest.fixture
def settings(pg_url: str, redis_url: str, parsed_dags: dict[str, list[dict[str, Any]]]) -> Settings:
    """Settings on this test's database, which holds the parsed test DAGs."""
    add_parsed_dags(pg_url, parsed_dags)
    return Settings(
        database_url=pg_url,
        broker_url=redis_url,
        namespace=f"t{uuid.uuid4().hex[:8]}",
        heartbeat_timeout=5,
    )


def client_for(settings: Settings, config: ApiConfig) -> Iterator[TestClient]:
    with TestClient(create_app(settings, config=config), raise_server_exceptions=False) as client:
        yield client


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    """The API with a token set: reads open, writes with AUTH."""
    yield from client_for(settings, ApiConfig(token=TOKEN))


@pytest.fixture(params=["postgresql", "sqlite"])
def db_url(request: pytest.FixtureRequest, parsed_dags: dict[str, list[dict[str, Any]]]) -> str:
    """A migrated database of this test holding the parsed test DAGs, on each database."""
    url = str(request.getfixturevalue("pg_url" if request.param == "postgresql" else "sqlite_url"))
    add_parsed_dags(url, parsed_dags)
    return url
