"""The CLI's tables as a user meets them on an 80-column terminal, and on a narrow one.

One world is built once (real scheduler, worker and `backfill --local`, on PostgreSQL):
a scheduled run, a manual run of today, a manual run that failed with a long error (its
downstream upstream_failed) at an old logical date, two backfill runs, a DAG without
runs, a file that fails to import, a pool with a long name. Then every table is read
through `sluice` subprocesses with COLUMNS=80 (and 40): states, times and durations are
whole, today's times are HH:MM:SS, paths are relative to the DAGs folder, errors are
whole lines under the table, and no table line is wider than the terminal.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import signal
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import redis
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.pool import NullPool

from tests.conftest import _redis_dbs, migrated_database
from tests.procs import Sluice, wait_until
from tests.redis_server import session_redis

LONG_ERROR = (
    "the warehouse refused the load: column 'amount' overflows NUMERIC(12,2) in row 4711 "
    "of batch 2026-06-01/orders (retry after fixing the source)"
)
IMPORT_ERROR = (
    "the module 'vendor_sdk_that_is_not_installed' is needed by this DAG file and cannot "
    "be found on this machine"
)
NIGHTLY = f"""
from datetime import datetime, timezone
from sluice import DAG, task

with DAG("nightly", schedule="@daily", catchup=False,
         start_date=datetime(2026, 1, 1, tzinfo=timezone.utc)) as dag:
    @task
    def extract_the_orders_of_the_day(context):
        if context["conf"].get("fail"):
            raise ValueError({LONG_ERROR!r})
        return 1

    @task
    def load_them_into_the_warehouse():
        return 2

    extract_the_orders_of_the_day >> load_them_into_the_warehouse

with DAG("idle", schedule=None) as idle:
    @task
    def nothing():
        return 0
"""
BROKEN = f"from sluice import DAG\nraise ImportError({IMPORT_ERROR!r})\n"
BACKFILL_TIMEOUT = 180
"""A `backfill --local` runs its runs' tasks in its own process: minutes on a loaded VM."""
POOL = "warehouse_loads_of_the_finance_team_at_night"


@dataclass
class World:
    sluice: Sluice
    backfill_80: str
    """What `sluice backfill` printed at COLUMNS=80."""
    backfill_40: str
    """What `sluice backfill` printed at COLUMNS=40."""

    def at(self, columns: int, *args: str, timeout: float = 60) -> str:
        """stdout of `sluice ARGS` on a terminal `columns` wide (exit 0 asserted)."""
        self.sluice.extra_env["COLUMNS"] = str(columns)
        done = self.sluice.cli(*args, timeout=timeout)
        assert done.returncode == 0, done.stderr
        return done.stdout


@pytest.fixture(scope="module")
def world(pg_admin: Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """The runs and files every test here reads; no process is left running after it."""
    base = tmp_path_factory.mktemp("a_folder_whose_name_is_long_enough_to_fill_a_column")
    folder = base / "dags"
    (folder / "etl").mkdir(parents=True)
    (folder / "etl" / "nightly.py").write_text(NIGHTLY)
    (folder / "broken_dag.py").write_text(BROKEN)
    logs = base / "logs"
    logs.mkdir()
    server = session_redis()
    db = next(_redis_dbs)
    redis.Redis(port=server.port, db=db).flushdb()
    databases = migrated_database(pg_admin)
    sluice = Sluice(next(databases), server.url(db), folder, logs)
    try:
        sluice.ok("pools", "set", POOL, "3")
        scheduler = sluice.scheduler()
        sluice.worker()
        sluice.trigger("nightly", "--run-id", "today_ok")
        sluice.trigger(
            "nightly",
            "--run-id",
            "broke",
            "--logical-date",
            "2026-06-01T12:34:56+00:00",
            "--conf",
            '{"fail": true}',
        )
        scheduled = wait_until(lambda: scheduled_run(sluice), timeout=30)
        for run_id, end in (("today_ok", "success"), ("broke", "failed"), (scheduled, "success")):
            assert ended(sluice, run_id) == end, sluice.logs()
        world = World(sluice, "", "")
        world.backfill_80 = world.at(
            80,
            "backfill",
            "nightly",
            "--start",
            "2026-03-01",
            "--end",
            "2026-03-02",
            "--local",
            timeout=BACKFILL_TIMEOUT,
        )
        world.backfill_40 = world.at(
            40,
            "backfill",
            "nightly",
            "--start",
            "2026-03-03",
            "--end",
            "2026-03-03",
            "--local",
            timeout=BACKFILL_TIMEOUT,
        )
        sluice.stop(scheduler, signal.SIGKILL)  # its job row stays: a stale live job
        sluice.stop_all()
        yield world
    finally:
        sluice.stop_all()
        next(databases, None)


def ended(sluice: Sluice, run_id: str) -> str:
    """The state run `run_id` of nightly ends in (waited for in the database)."""

    def final() -> str | None:
        state = sluice.db_run_state("nightly", run_id)
        return state if state in ("success", "failed") else None

    return wait_until(final)


def scheduled_run(sluice: Sluice) -> str | None:
    """The run id of the scheduled run the scheduler made, once it did."""
    engine = create_engine(sluice.database_url, poolclass=NullPool)
    with engine.connect() as conn:
        found = conn.execute(
            text("SELECT run_id FROM dag_run WHERE run_type = 'scheduled'")
        ).scalar()
    engine.dispose()
    return found


def shown(value: str | None, now: dt.datetime) -> str:
    """How the issue says a time is shown: HH:MM:SS today, else a date and a time (UTC)."""
    assert value is not None
    at = dt.datetime.fromisoformat(value).astimezone(dt.UTC)
    if at.date() == now.date():
        return at.strftime("%H:%M:%S")
    return at.strftime("%Y-%m-%d %H:%M:%S")


def table_lines(out: str, *whole_lines: str) -> list[str]:
    """The lines of `out` that are not one of `whole_lines` (notes a terminal wraps)."""
    lines = out.splitlines()
    for line in whole_lines:
        assert line in lines, f"{line!r} is not a line of:\n{out}"
    return [line for line in lines if line not in whole_lines]


def assert_fits(out: str, columns: int, *whole_lines: str) -> None:
    """Nothing cut (no ellipsis); every table line within the terminal's width."""
    assert "…" not in out, out
    wide = [line for line in table_lines(out, *whole_lines) if len(line) > columns]
    assert not wide, f"lines wider than {columns}:\n" + "\n".join(wide)


def words(out: str) -> set[str]:
    """The words of `out`, as whitespace separates them (a trailing `:` or `,` dropped)."""
    return {word.rstrip(":,") for word in out.split()}


# -- sluice dags runs ---------------------------------------------------------------------


def test_dags_runs_lists_newest_first_with_type_state_dates_start_and_duration(
    world: World,
) -> None:
    out = world.at(80, "dags", "runs", "nightly")
    runs = json.loads(world.at(80, "dags", "runs", "nightly", "--json"))
    now = dt.datetime.now(dt.UTC)

    assert_fits(out, 80)
    header = out.splitlines()[0].split()
    assert header == ["run_id", "type", "state", "logical", "date", "start", "duration"]
    logical = [r["logical_date"] for r in runs]
    assert logical == sorted(logical, reverse=True) and len(runs) == 6
    assert [r["run_id"] for r in runs][0] == "today_ok"
    assert [r["run_id"] for r in runs][2:] == [
        "broke",
        "backfill__2026-03-03T00:00:00+00:00",
        "backfill__2026-03-02T00:00:00+00:00",
        "backfill__2026-03-01T00:00:00+00:00",
    ]
    # one row per run, in that order, each with its type, state, dates and duration whole
    rows = [line for line in out.splitlines()[2:] if re.search(r"\d\.\d\ds$", line)]
    assert len(rows) == 6, out
    for line, run in zip(rows, runs, strict=True):
        cells = f"{run['run_type']}  +{run['state']}  +{re.escape(shown(run['logical_date'], now))}"
        assert re.search(cells, line), (line, run)
        assert shown(run["start_date"], now) in line, (line, run)
        seconds = float(line.rsplit(" ", 1)[1].rstrip("s"))
        assert abs(seconds - run["duration_seconds"]) <= 0.011, (line, run)
    assert "2026-06-01 12:34:56" in rows[2]  # an old logical date: its date and time
    assert re.search(r"manual +success +\d\d:\d\d:\d\d +\d\d:\d\d:\d\d ", rows[0])
    assert "times in UTC" in out.splitlines()


def test_dags_runs_filters_by_state_and_limit_json_is_one_document(world: World) -> None:
    failed = world.sluice.cli("dags", "runs", "nightly", "--state", "failed", "--json")
    newest = world.sluice.cli("dags", "runs", "nightly", "--limit", "2", "--json")
    text = world.at(80, "dags", "runs", "nightly", "--limit", "2")

    assert failed.returncode == 0 and newest.returncode == 0
    only = json.loads(failed.stdout)
    assert [(r["run_id"], r["state"], r["run_type"]) for r in only] == [
        ("broke", "failed", "manual")
    ]
    assert only[0]["logical_date"] == "2026-06-01T12:34:56+00:00"
    assert set(only[0]) >= {"start_date", "end_date", "duration_seconds", "queued_at"}
    assert len(json.loads(newest.stdout)) == 2
    assert "the newest 2 of 6 runs are shown" in newest.stderr
    assert "the newest 2 of 6 runs are shown: --limit N for more" in text
    assert "today_ok" in text and "broke" not in text


def test_dags_runs_of_a_dag_without_runs_says_so(world: World) -> None:
    assert world.at(80, "dags", "runs", "idle").strip() == "DAG idle has no runs"
    assert json.loads(world.at(80, "dags", "runs", "idle", "--json")) == []
    out = world.at(80, "dags", "runs", "nightly", "--state", "queued")
    assert out.strip() == "DAG nightly has no runs in state queued"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--state", "done"], "--state must be one of queued, running, success, failed"),
        (["--state", "\x1b[31mred"], "got '\\x1b[31mred'"),
        (["--limit", "0"], "--limit must be between 1 and 2147483647, got 0"),
        (["--limit", "-3"], "--limit must be between 1 and 2147483647, got -3"),
        (["--limit", "99999999999"], "--limit must be between 1"),
        (["--limit", "ten"], "--limit must be a whole number of runs, got 'ten'"),
        (["--limit", "2.5", "--json"], "--limit must be a whole number"),
    ],
)
def test_dags_runs_refuses_a_bad_state_or_limit_in_one_line(
    world: World, args: list[str], needle: str
) -> None:
    done = world.sluice.cli("dags", "runs", "nightly", *args)

    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], done.stderr
    assert "\x1b" not in done.stderr


def test_dags_runs_of_an_unknown_dag_is_one_line(world: World) -> None:
    for args in (["ghost"], ["ghost", "--json"]):
        done = world.sluice.cli("dags", "runs", *args)
        assert done.returncode == 2 and done.stdout == ""
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "unknown DAG 'ghost'" in lines[0], done.stderr


# -- the other tables at 80 columns ---------------------------------------------------------


def test_tasks_states_shows_states_times_durations_and_the_error_whole(world: World) -> None:
    broke = world.at(80, "tasks", "states", "nightly", "broke")
    today = world.at(80, "tasks", "states", "nightly", "today_ok")
    tis = json.loads(world.at(80, "tasks", "states", "nightly", "today_ok", "--json"))
    now = dt.datetime.now(dt.UTC)

    error_line = f"extract_the_orders_of_the_day, try 1: ValueError: {LONG_ERROR}"
    assert_fits(broke, 80, error_line)
    assert {"failed", "upstream_failed"} <= words(broke)
    assert re.search(r"^load_them_into_the_\S* +upstream_failed +0 +default *$", broke, re.M)
    assert_fits(today, 80)
    assert today.splitlines()[0].split() == [
        "task_id", "index", "state", "try", "queue", "start", "duration"
    ]  # fmt: skip
    for ti in tis:
        assert ti["start_date"] is not None
        assert re.search(rf"success +1 +default +{shown(ti['start_date'], now)} +\d", today)
    assert not re.search(r"\d{4}-\d\d-\d\d", today)  # today's times carry no date


def test_dags_list_shows_relative_files_when_the_next_run_comes_and_import_errors(
    world: World,
) -> None:
    out = world.at(80, "dags", "list")
    listed = json.loads(world.at(80, "dags", "list", "--json"))
    now = dt.datetime.now(dt.UTC)

    error_line = f"broken_dag.py: ImportError: {IMPORT_ERROR} (broken_dag.py, line 2)"
    assert_fits(out, 80, error_line)
    assert str(world.sluice.dags_folder) not in out
    assert "etl/nightly.py" in words(out) and "broken_dag.py" in words(out)
    nightly = next(d for d in listed if d["dag_id"] == "nightly")
    # the next run is created when its interval ends, in the future; its logical date
    # (the interval's start) is shown beside it
    create_after = dt.datetime.fromisoformat(nightly["next_dagrun_create_after"])
    assert create_after > now
    beside = (
        f"{shown(nightly['next_dagrun_create_after'], now)}  {shown(nightly['next_dagrun'], now)}"
    )
    row = next(line for line in out.splitlines() if line.startswith("nightly "))
    assert beside in row and "@daily" in row, out
    assert "next run at" in out.splitlines()[0] and "logical date" in out.splitlines()[0]


def test_status_and_pools_list_fit_80_columns(world: World) -> None:
    # the scheduler was killed: once its heartbeat is old, its job shows as stale
    def stale() -> list[dict]:
        report = json.loads(world.at(80, "status", "--json", "--workers-timeout", "0"))
        return [job for job in report["jobs"] if not job["alive"]]

    (job,) = wait_until(stale, timeout=30, every=0.5)
    status = world.at(80, "status", "--workers-timeout", "0")
    pools = world.at(80, "pools", "list")

    stale_line = (
        f"job {job['id']} (scheduler on {job['hostname']}) is stale: no heartbeat for over 5s"
    )
    assert_fits(status, 80, stale_line)
    assert {"upstream_failed", "failed", "success", "scheduler"} <= words(status)
    assert re.search(r"default +upstream_failed +1\b", status), status
    assert re.search(rf"^ *{job['id']} +scheduler +.* {job['pid']} +", status, re.M), status
    assert_fits(pools, 80)
    assert POOL in pools and re.search(rf"{POOL} +3 +0", pools), pools
    assert "default_pool" in pools


def test_backfill_lists_its_runs_in_80_columns(world: World) -> None:
    assert_fits(world.backfill_80, 80)
    rows = [line for line in world.backfill_80.splitlines() if "backfill  " in line]
    assert len(rows) == 2, world.backfill_80
    assert all(re.search(r"backfill +success +2026-03-0[12] 00:00:00 ", r) for r in rows)


# -- a narrow terminal ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "whole"),
    [
        (["dags", "runs", "nightly"], ["backfill", "scheduled", "manual", "success", "failed"]),
        (["tasks", "states", "nightly", "broke"], ["upstream_failed", "failed"]),
        (["dags", "list"], ["etl/nightly.py", "broken_dag.py", "@daily"]),
        (["status", "--workers-timeout", "0"], ["upstream_failed", "delivered"]),
        (["pools", "list"], ["default_pool"]),
    ],
    ids=["dags runs", "tasks states", "dags list", "status", "pools list"],
)
def test_a_narrow_terminal_keeps_states_times_and_names_whole(
    world: World, args: list[str], whole: list[str]
) -> None:
    out = world.at(40, *args)

    notes = [
        line
        for line in out.splitlines()
        if ": ImportError: " in line or ", try 1: " in line or " is stale: " in line
    ]
    assert_fits(out, 40, *notes)
    assert set(whole) <= words(out), out


def test_a_narrow_terminal_shows_an_old_logical_date_whole(world: World) -> None:
    out = world.at(40, "dags", "runs", "nightly", "--state", "failed")

    assert_fits(out, 40)
    assert "  logical date: 2026-06-01 12:34:56" in out.splitlines(), out  # under its run
    assert "  state: failed" in out.splitlines()


def test_backfill_in_a_narrow_terminal_keeps_its_run_whole(world: World) -> None:
    assert_fits(world.backfill_40, 40)
    assert "backfill__2026-03-03T00:00:00+00:00" in world.backfill_40
    assert {"success", "backfill"} <= words(world.backfill_40)
    assert "2026-03-03 00:00:00" in world.backfill_40
