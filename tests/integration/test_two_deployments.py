"""Two deployments on one broker and namespace (two databases): a worker puts a message
of the other deployment back, with an ERROR that names the cause, instead of eating it."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from tests.conftest import migrated_database
from tests.procs import Sluice, wait_until

DAG = """
from sluice import DAG, task

with DAG("shared", schedule=None) as dag:
    task(task_id="t")(lambda: 1)
"""


@pytest.fixture
def other_database(pg_admin: Engine) -> Iterator[str]:
    """A second migrated database: the other deployment's."""
    yield from migrated_database(pg_admin)


def test_a_worker_puts_back_the_other_deployment_s_message(
    sluice: Sluice, other_database: str, tmp_path: Path
) -> None:
    # Given deployment A (a scheduler, no worker yet) and B (a worker only), one broker
    # and one namespace; A's queued sweep far away, so only the first message can serve
    sluice.extra_env["SLUICE_QUEUED_TIMEOUT"] = "300"
    (sluice.dags_folder / "shared.py").write_text(textwrap.dedent(DAG))
    logs = tmp_path / "b-logs"
    logs.mkdir()
    other = Sluice(other_database, sluice.broker_url, sluice.dags_folder, logs)
    other.namespace = sluice.namespace
    other.run("dags", "list")
    sluice.scheduler()
    strangers = other.worker()
    try:
        # When A triggers a run: B's worker gets its message first
        run_id = sluice.trigger("shared")
        wait_until(lambda: "comes from deployment" in other.logs(), timeout=30)
        assert "two deployments share the broker and the namespace" in other.logs()
        assert sluice.db_task_states("shared", run_id)["t"]["state"] == "queued"
        # Then the message is not lost: A's own worker runs it
        sluice.worker()
        assert sluice.wait_run("shared", run_id, timeout=30) == "success"
    finally:
        other.stop(strangers)
        other.stop_all()
