"""Typed params and the run's dates on real processes: a conf the params refuse is one line
and exit 2 (the CLI, `sluice standalone`) or a 422 with the same line (the API), and no run
is written; the defaults and the conf's values reach `context["params"]` of a real run, with
`ds` and the data interval of a manual, a scheduled and a backfill run.

Real PostgreSQL, Redis, `sluice scheduler` and `sluice worker`; `sluice standalone` on
SQLite for the runs that TriggerDagRun and a watch ask for.
"""

from __future__ import annotations

import datetime as dt
import json
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from sluice.scheduler.api.app import create_app
from sluice.scheduler.api.config import ApiConfig
from sluice.scheduler.core.settings import Settings
from tests.integration.test_cancel_run import rows
from tests.integration.test_standalone import background, env_for, rows_once_there
from tests.procs import Sluice, run_sluice, standalone, wait_until

DAY = dt.timedelta(days=1)


def midnight(moment: dt.datetime) -> dt.datetime:
    return moment.replace(hour=0, minute=0, second=0, microsecond=0)


TODAY = midnight(dt.datetime.now(dt.UTC))

DAGS = f"""
import sluice
from sluice import DAG, Param, task

KEYS = ("params", "conf", "logical_date", "ds", "data_interval_start", "data_interval_end")

with DAG("typed", schedule=None, params={{
    "n": Param(10, type="integer", minimum=1, description="how many"),
    "day": Param(type="string", format="date"),
    "mode": Param("fast", enum=["fast", "full"]),
}}):
    @task
    def show(context):
        return {{key: context[key] for key in KEYS}}

with DAG("daily", schedule="@daily", start_date={TODAY - dt.timedelta(days=3)!r},
         catchup=False, params={{"n": Param(5, type="integer")}}):
    @task
    def show_daily(context):
        return {{key: context[key] for key in KEYS}}
"""
HEADER = "import datetime\n"  # what the repr of the start date names

ISSUE_SCHEMA = {
    "type": "object",
    "properties": {
        "n": {"type": "integer", "minimum": 1, "description": "how many", "default": 10},
        "day": {"type": "string", "format": "date"},
        "mode": {"enum": ["fast", "full"], "default": "fast"},
    },
    "required": ["day"],
}


def write_dags(folder: Path) -> None:
    (folder / "typed.py").write_text(HEADER + textwrap.dedent(DAGS))


def run_count(sluice: Sluice) -> int:
    (count,) = rows(sluice.database_url, "SELECT count(*) FROM dag_run")[0]
    assert isinstance(count, int)
    return count


def scheduled_runs(sluice: Sluice, dag_id: str) -> list[str]:
    """The run ids of the DAG's scheduled runs."""
    found = rows(
        sluice.database_url,
        f"SELECT run_id FROM dag_run WHERE dag_id = '{dag_id}' AND run_id LIKE 'scheduled__%'",
    )
    return [str(run_id) for (run_id,) in found]


def result_of(sluice: Sluice, dag_id: str, run_id: str) -> dict[str, Any]:
    found = rows(
        sluice.database_url,
        f"SELECT result FROM task_instance WHERE dag_id = '{dag_id}' AND run_id = '{run_id}'",
    )
    value = found[0][0]
    result = json.loads(value) if isinstance(value, str) else value
    assert isinstance(result, dict), found
    return result


@pytest.mark.timeout(120)
def test_a_bad_conf_exits_2_with_one_line_and_nothing_is_written(sluice: Sluice) -> None:
    write_dags(sluice.dags_folder)
    bad = sluice.cli("dags", "trigger", "typed", "--conf", '{"n": 0, "day": "2026-03-01"}')
    assert bad.returncode == 2, bad.stderr
    assert bad.stderr == "sluice: error: param 'n': 0 is less than the minimum of 1\n"
    assert bad.stdout == ""
    missing = sluice.cli("dags", "trigger", "typed", "--conf", '{"n": 3, "other": 1}')
    assert missing.returncode == 2, missing.stderr
    assert missing.stderr == (
        "sluice: error: param 'day' is required: it has no default; give it in the conf\n"
    )
    assert run_count(sluice) == 0
    # the same DAG, a conf that fits: a run
    run_id = sluice.trigger("typed", "--conf", '{"day": "2026-03-01"}')
    assert rows(sluice.database_url, "SELECT run_id, conf FROM dag_run") == [
        (run_id, {"day": "2026-03-01"})
    ]


@pytest.mark.timeout(120)
def test_the_api_answers_422_with_the_same_line_and_shows_the_schema(sluice: Sluice) -> None:
    write_dags(sluice.dags_folder)
    sluice.run("dags", "list")  # parse the DAG files into the database
    settings = Settings(
        database_url=sluice.database_url, broker_url=sluice.broker_url, namespace=sluice.namespace
    )
    token = uuid.uuid4().hex
    auth = {"Authorization": f"Bearer {token}"}
    app = create_app(settings, config=ApiConfig(token=token))
    with TestClient(app, raise_server_exceptions=False) as client:
        detail = client.get("/api/v1/dags/typed")
        assert detail.status_code == 200, detail.text
        assert detail.json()["params"] == ISSUE_SCHEMA
        assert list(detail.json())[-3:] == ["params", "groups", "tasks"]
        assert detail.json()["groups"] == []
        plain = client.get("/api/v1/dags/daily").json()["params"]
        assert plain["properties"] == {"n": {"type": "integer", "default": 5}}
        assert plain["required"] == []
        for conf, line in (
            ({"n": 0, "day": "2026-03-01"}, "param 'n': 0 is less than the minimum of 1"),
            ({"n": "3", "day": "2026-03-01"}, "param 'n': '3' is not of type 'integer'"),
            ({"day": "2026-02-30"}, "param 'day': '2026-02-30' is not a 'date'"),
            ({"day": "2026-03-01", "mode": "slow"}, "param 'mode': 'slow' is not one of "),
            ({}, "param 'day' is required: it has no default; give it in the conf"),
        ):
            answer = client.post("/api/v1/dags/typed/runs", json={"conf": conf}, headers=auth)
            assert answer.status_code == 422, answer.text
            assert answer.json()["detail"].startswith(line), answer.json()
        assert run_count(sluice) == 0
        made = client.post(
            "/api/v1/dags/typed/runs",
            json={"run_id": "api-1", "conf": {"day": "2026-03-01", "n": 2}},
            headers=auth,
        )
        assert made.status_code == 201, made.text
        assert made.json()["conf"] == {"day": "2026-03-01", "n": 2}
    assert run_count(sluice) == 1


@pytest.mark.timeout(60)
def test_standalone_refuses_a_bad_conf_and_leaves_no_database(tmp_path: Path) -> None:
    dags = tmp_path / "dags"
    dags.mkdir()
    write_dags(dags)
    database = tmp_path / "standalone.db"
    done = standalone(
        tmp_path, dags, f"sqlite:///{database}", "--trigger", "typed", "--conf", '{"n": 0}'
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "sluice: error: param 'day' is required: it " + (
        "has no default; give it in the conf"
    )
    assert not database.exists()


@pytest.mark.long
@pytest.mark.timeout(150)
def test_params_and_dates_reach_the_context_of_real_runs(sluice: Sluice) -> None:
    write_dags(sluice.dags_folder)
    sluice.scheduler()
    sluice.worker()
    # A manual run: the defaults fill what the conf leaves out; its interval is its date
    run_id = sluice.trigger(
        "typed",
        "--conf",
        '{"day": "2026-03-01", "mode": "full", "extra": [1]}',
        "--logical-date",
        "2026-03-01T12:30:00Z",
    )
    assert sluice.wait_run("typed", run_id) == "success", sluice.logs()
    assert result_of(sluice, "typed", run_id) == {
        "params": {"n": 10, "day": "2026-03-01", "mode": "full"},
        "conf": {"day": "2026-03-01", "mode": "full", "extra": [1]},
        "logical_date": "2026-03-01T12:30:00+00:00",
        "ds": "2026-03-01",
        "data_interval_start": "2026-03-01T12:30:00+00:00",
        "data_interval_end": "2026-03-01T12:30:00+00:00",
    }
    # The scheduled run (catchup off: the latest complete day): its interval is that day
    # (the day before TODAY, or before the next day if midnight passed meanwhile)
    scheduled = min(wait_until(lambda: scheduled_runs(sluice, "daily"), timeout=60))
    yesterday = dt.datetime.fromisoformat(scheduled.removeprefix("scheduled__"))
    latest_complete = {TODAY - dt.timedelta(days=1), midnight(dt.datetime.now(dt.UTC)) - DAY}
    assert yesterday in latest_complete, (scheduled, TODAY)
    assert sluice.wait_run("daily", scheduled) == "success", sluice.logs()
    assert result_of(sluice, "daily", scheduled) == {
        "params": {"n": 5},
        "conf": {},
        "logical_date": yesterday.isoformat(),
        "ds": yesterday.date().isoformat(),
        "data_interval_start": yesterday.isoformat(),
        "data_interval_end": (yesterday + DAY).isoformat(),
    }
    # A backfill's run covers its day too; run in the backfill's process (--local)
    sluice.ok("backfill", "daily", "--start", "2026-04-01", "--end", "2026-04-01", "--local")
    backfilled = result_of(sluice, "daily", "backfill__2026-04-01T00:00:00+00:00")
    assert backfilled["ds"] == "2026-04-01" and backfilled["params"] == {"n": 5}
    assert backfilled["data_interval_start"] == "2026-04-01T00:00:00+00:00"
    assert backfilled["data_interval_end"] == "2026-04-02T00:00:00+00:00"
    # A manual run of the scheduled DAG: no interval, both ends its logical date
    manual = sluice.trigger("daily", "--conf", '{"n": 7}', "--logical-date", "2026-05-02")
    assert sluice.wait_run("daily", manual) == "success", sluice.logs()
    dates = result_of(sluice, "daily", manual)
    assert dates["params"] == {"n": 7} and dates["ds"] == "2026-05-02"
    assert (
        dates["data_interval_start"] == dates["data_interval_end"] == ("2026-05-02T00:00:00+00:00")
    )


ELSEWHERE = """
import pathlib
from datetime import timedelta
import sluice
from sluice import DAG, Param, task

INBOX = pathlib.Path({inbox!r})

with DAG("typed", schedule=None, params={{
    "n": Param(10, type="integer", minimum=1),
    "day": Param(type="string", format="date"),
}}):
    @task
    def show(context):
        return context["params"]

with DAG("caller", schedule=None):
    sluice.TriggerDagRun("start_typed", trigger_dag_id="typed", conf={{"n": 0, "day": "2026-03"}})

def files(context):
    for path in sorted(INBOX.iterdir()):
        yield sluice.RunRequest(run_key=path.name, conf={{"n": int(path.read_text())}})

with DAG("watched", schedule=sluice.Watch(files, interval=timedelta(seconds=0.5)),
         params={{"n": Param(1, type="integer", minimum=1)}}):
    @task
    def process(context):
        return context["params"]["n"]
"""


@pytest.mark.timeout(150)
def test_a_triggered_run_and_a_watchs_request_are_checked_where_the_run_is_made(
    tmp_path: Path,
) -> None:
    """`sluice standalone` on SQLite: TriggerDagRun with a conf the target's params refuse
    fails with the line and makes no run; a watch's request with such a conf makes no run,
    is the watch's error, and the other requests make theirs."""
    dags, inbox = tmp_path / "dags", tmp_path / "inbox"
    dags.mkdir()
    inbox.mkdir()
    (dags / "elsewhere.py").write_text(textwrap.dedent(ELSEWHERE.format(inbox=str(inbox))))
    url = f"sqlite:///{tmp_path / 'sluice.db'}"
    env = env_for(url, dags)

    def runs(dag_id: str) -> list[tuple[object, ...]] | None:
        return rows_once_there(
            url, f"SELECT run_id, state FROM dag_run WHERE dag_id = '{dag_id}' ORDER BY run_id"
        )

    with background(tmp_path, env) as started:
        wait_until(lambda: "dags trigger" in started.stderr(), timeout=60)
        (inbox / "bad").write_text("0")
        (inbox / "good").write_text("2")
        wait_until(lambda: runs("watched") == [("watch__good", "success")], timeout=30)
        error = wait_until(
            lambda: rows(url, "SELECT last_error FROM dag_watch WHERE dag_id = 'watched'")[0][0]
        )
        assert error == "run key 'bad': param 'n': 0 is less than the minimum of 1"
        done = run_sluice("dags", "trigger", "caller", env=env, cwd=tmp_path, timeout=60)
        assert done.returncode == 0, done.stderr
        wait_until(lambda: [s for _, s in runs("caller") or []] == ["failed"], timeout=30)
        (failure,) = rows(url, "SELECT error FROM task_instance WHERE dag_id = 'caller'")
        assert failure[0] == (
            "cannot trigger a run of DAG 'typed': param 'n': 0 is less than the minimum of 1"
        )
        assert runs("typed") == []
        assert runs("watched") == [("watch__good", "success")]
        assert started.proc.poll() is None
