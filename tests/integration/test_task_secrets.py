"""Tasks do not see the deployment's secrets, and their logs show none (issue 39, 4.7).

A task's environment held `SLUICE_DATABASE_URL` and `SLUICE_BROKER_URL` with their
passwords and `SLUICE_API_TOKEN`; a task printing `os.environ` (or a shell task running
`env`) stored them in its log, which the API serves without a token by default. Now the
task's process has none of them (unless `SLUICE_TASK_ENV_ALLOW` names one), and a secret
value that still reaches a log line or an error is masked `***`.

Real PostgreSQL (trust auth accepts any password, so the URL can carry one), a Redis of
the test's own with `requirepass`, a real `sluice scheduler` and `sluice worker`
(prefork and threads pools), and `sluice backfill --local` (tasks in the CLI's threads).
"""

from __future__ import annotations

import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from sqlalchemy import text

from tests.procs import Sluice
from tests.redis_server import REDIS_SERVER, OwnRedis

DB_PASSWORD = "s3cretpw"
BROKER_PASSWORD = "br0kerPassw0rd"
API_TOKEN = f"api-token-{uuid.uuid4().hex}"

SECRETS_DAG = """
import os
from datetime import datetime, timezone
from pathlib import Path
from sluice import DAG, ShellTask, task

TOKEN_FILE = {token_file!r}
SEEN = {seen!r}

with DAG("secrets", schedule="@daily", start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
         catchup=False) as dag:
    @task
    def dump(context):
        names = sorted(k for k in os.environ if k.startswith("SLUICE_"))
        Path(SEEN, context["run_id"].replace(":", "_")).write_text("\\n".join(names))
        for name in names:
            print(f"{{name}}={{os.environ[name]}}")
        print("token read from a file:", Path(TOKEN_FILE).read_text().strip())

    shell = ShellTask(
        "shell", command="env | grep SLUICE_ | sort; echo file says $(cat {token_file})"
    )

    @task
    def leak():
        raise RuntimeError("the token is " + Path(TOKEN_FILE).read_text().strip())

    dump >> shell
"""


@pytest.fixture
def secret_redis() -> Iterator[OwnRedis]:
    """A Redis of this test's own that asks for a password."""
    if REDIS_SERVER is None:
        pytest.skip("redis-server not installed")
    server = OwnRedis()
    server.start()
    client = redis.Redis(port=server.port)
    client.config_set("requirepass", BROKER_PASSWORD)
    client.close()
    yield server
    server.stop()


def with_password(url: str, password: str) -> str:
    scheme, rest = url.split("://", 1)
    user_host = rest.split("@", 1)
    if len(user_host) == 2:
        return f"{scheme}://{user_host[0]}:{password}@{user_host[1]}"
    return f"{scheme}://:{password}@{rest}"


def stored_logs(sluice: Sluice) -> dict[str, str]:
    with sluice._connect() as conn:
        rows = conn.execute(
            text(
                "SELECT ti.task_id, ti.run_id, l.content FROM task_log l "
                "JOIN task_instance ti ON ti.id = l.ti_id"
            )
        ).all()
    return {f"{run_id}.{task_id}": content for task_id, run_id, content in rows}


def stored_errors(sluice: Sluice) -> dict[str, str | None]:
    with sluice._connect() as conn:
        rows = conn.execute(text("SELECT run_id, task_id, error FROM task_instance")).all()
    return {f"{run_id}.{task_id}": error for run_id, task_id, error in rows}


@pytest.mark.parametrize("pool", ["prefork", "threads"])
def test_tasks_see_no_secret_and_their_logs_show_none(
    pool: str, sluice: Sluice, secret_redis: OwnRedis, tmp_path: Path
) -> None:
    """With the prefork pool (a child per task slot) and the threads pool (the tasks
    share the worker's main process), and by a local backfill."""
    # Given a deployment whose URLs carry passwords, with an API token, and a DAG that
    # prints its environment and a token it reads from a file
    sluice.database_url = with_password(sluice.database_url, DB_PASSWORD)
    sluice.broker_url = with_password(secret_redis.url(0), BROKER_PASSWORD)
    wakeup_url = with_password(secret_redis.url(1), BROKER_PASSWORD)
    sluice.extra_env.update(
        SLUICE_API_TOKEN=API_TOKEN,
        SLUICE_WAKEUP_URL=wakeup_url,
        SLUICE_TASK_ENV_ALLOW="SLUICE_WAKEUP_URL",  # given back to tasks, masked in logs
    )
    token_file = tmp_path / "token"
    token_file.write_text(API_TOKEN)
    seen = tmp_path / "seen"
    seen.mkdir()
    (sluice.dags_folder / "secrets.py").write_text(
        textwrap.dedent(SECRETS_DAG.format(token_file=str(token_file), seen=str(seen)))
    )
    sluice.run("dags", "list")

    # When it runs on a worker, and by a local backfill (threads of the CLI)
    sluice.scheduler()
    sluice.start("worker", "worker", "-Q", "default", "--pool", pool)
    run_id = sluice.trigger("secrets")
    assert sluice.wait_run("secrets", run_id) == "failed"  # `leak` fails, as written
    backfill = sluice.cli(
        "backfill", "secrets", "--start", "2026-02-01", "--end", "2026-02-01", "--local"
    )
    assert backfill.returncode == 1, backfill.stderr  # `leak` again

    # Then the tasks' processes had no secret variable, but the one allowed and the
    # plain ones
    for file in seen.iterdir():
        names = set(file.read_text().split())
        assert {"SLUICE_WAKEUP_URL", "SLUICE_NAMESPACE"} <= names, file.name
        assert not names & {"SLUICE_DATABASE_URL", "SLUICE_BROKER_URL", "SLUICE_API_TOKEN"}
    ran = {file.name for file in seen.iterdir()}
    assert {run_id.replace(":", "_"), "backfill__2026-02-01T00_00_00+00_00"} <= ran

    # And no stored log or error holds a secret; what was printed of one is masked
    secrets = [DB_PASSWORD, BROKER_PASSWORD, API_TOKEN, wakeup_url, sluice.database_url]
    logs = stored_logs(sluice)
    errors = stored_errors(sluice)
    assert len(logs) >= 4, logs
    for where, content in {**logs, **errors}.items():
        for secret in secrets:
            assert secret not in (content or ""), f"{where} shows {secret}"
    for run in (run_id, "backfill__2026-02-01T00:00:00+00:00"):
        assert "token read from a file: ***" in logs[f"{run}.dump"]
        assert "SLUICE_WAKEUP_URL=***" in logs[f"{run}.dump"]
        assert "file says ***" in logs[f"{run}.shell"]
        assert "SLUICE_TASK_ID=shell" in logs[f"{run}.shell"]  # plain variables stay
        assert errors[f"{run}.leak"] == "RuntimeError: the token is ***"


PEEKING_DAG = """
import os
from pathlib import Path
from sluice import DAG, task

Path({seen!r}).write_text("\\n".join(sorted(k for k in os.environ if k.startswith("SLUICE_"))))

with DAG("peeking", schedule=None) as dag:
    @task
    def nothing():
        pass
"""


def test_a_dag_files_top_level_code_sees_no_secret_either(sluice: Sluice, tmp_path: Path) -> None:
    # Given a DAG file whose top-level code (run by the folder's parser) notes the
    # SLUICE_ variables it sees, in a deployment with an API token
    seen = tmp_path / "seen"
    sluice.extra_env.update(SLUICE_API_TOKEN=API_TOKEN, SLUICE_TASK_ENV_ALLOW="SLUICE_API_TOKEN")
    (sluice.dags_folder / "peeking.py").write_text(PEEKING_DAG.format(seen=str(seen)))
    # When the folder is parsed (`sluice dags list` syncs it, as a scheduler's parser does)
    sluice.run("dags", "list")
    # Then the parser saw the plain variables and the one allowed, no other secret
    names = set(seen.read_text().split())
    assert {"SLUICE_DAGS_FOLDER", "SLUICE_NAMESPACE", "SLUICE_API_TOKEN"} <= names
    assert not names & {"SLUICE_DATABASE_URL", "SLUICE_BROKER_URL"}
