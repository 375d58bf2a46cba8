"""`GET …/grid?format=compact` against `format=cells`, on PostgreSQL and on SQLite.

The runs are made as triggers make them (`create_dagrun`), then their TIs are written to
the cases the grid must show: a retry, a task missing from an older run, a mapped task's
indexes (with and without its placeholder), a task id of an older version. Every cell
of the compact grid, decoded as its schema says, must be the default format's cell.
No broker: the grid reads the database only.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, delete, insert, text, update
from sqlalchemy.orm import Session

from sluice.scheduler.api import create_app, grid
from sluice.scheduler.api.config import ApiConfig
from sluice.scheduler.api.grid import SUMMARY_ORDER, TRIED
from sluice.scheduler.api.schemas import CompactGrid
from sluice.scheduler.core.db import make_engine, make_session_factory, transaction
from sluice.scheduler.core.models import Dag, DagRun, TaskInstance
from sluice.scheduler.core.settings import Settings
from sluice.scheduler.core.states import TI, RunType
from sluice.scheduler.scheduling.dagrun import create_dagrun
from tests.api.test_dag_shapes import sent_statements

V1 = "/api/v1"
DAY = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


@pytest.fixture
def client(db_url: str) -> Iterator[TestClient]:
    settings = Settings(database_url=db_url, namespace=f"t{uuid.uuid4().hex[:8]}")
    app = create_app(settings, config=ApiConfig())
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


def _runs(url: str, count: int) -> list[int]:
    """`count` manual runs of `demo`, a day apart from DAY, oldest first: their keys."""
    engine = make_engine(url)
    try:
        keys = []
        for i in range(count):
            with transaction(make_session_factory(engine)) as session:
                dag = session.get(Dag, "demo")
                assert dag is not None
                run = create_dagrun(
                    session,
                    dag,
                    run_type=RunType.MANUAL,
                    logical_date=DAY + dt.timedelta(days=i),
                    now=DAY,
                    run_id=f"r{i}",
                )
                keys.append(run.id)
        return keys
    finally:
        engine.dispose()


def _write(url: str, change: Any) -> None:
    engine = make_engine(url)
    try:
        with transaction(make_session_factory(engine)) as session:
            change(session)
    finally:
        engine.dispose()


def _set(session: Session, run: int, task: str, state: TI, try_number: int) -> None:
    session.execute(
        update(TaskInstance)
        .where(TaskInstance.dag_run_id == run, TaskInstance.task_id == task)
        .values(state=state, try_number=try_number)
    )


def _add(session: Session, run: int, task: str, index: int, state: TI, try_number: int) -> None:
    """A TI as the scheduler writes one (a mapped index, or an older version's task)."""
    found = session.get(DagRun, run)
    assert found is not None
    session.execute(
        insert(TaskInstance).values(
            dag_run_id=run,
            dag_id=found.dag_id,
            run_id=found.run_id,
            task_id=task,
            map_index=index,
            state=state,
            try_number=try_number,
        )
    )


def _seed(session: Session, old: int, new: int) -> None:
    """The cases: `old` lacks `audit` and has a task `gone` of an older version; `new` has
    a retry, and `load` mapped over three indexes (its placeholder became index 0)."""
    for task in ("extract", "transform", "load"):
        _set(session, old, task, TI.SUCCESS, 1)
    session.execute(
        delete(TaskInstance).where(TaskInstance.dag_run_id == old, TaskInstance.task_id == "audit")
    )
    _add(session, old, "gone", -1, TI.SKIPPED, 0)
    _set(session, new, "extract", TI.SUCCESS, 1)
    _set(session, new, "transform", TI.UP_FOR_RETRY, 2)
    session.execute(
        update(TaskInstance)
        .where(TaskInstance.dag_run_id == new, TaskInstance.task_id == "load")
        .values(map_index=0, state=TI.SUCCESS, try_number=1)
    )
    _add(session, new, "load", 1, TI.RUNNING, 3)
    _add(session, new, "load", 2, TI.SUCCESS, 1)


def codes(*states: TI | None) -> str:
    """A run's `states` for cells in these states (None: no TI): their codes, spelled out
    from the legend's order (which a new state may change)."""
    return "".join("-" if s is None else grid.CODE_OF[s] for s in states)


def decoded(grid: dict[str, Any]) -> list[dict[str, dict[str, Any]]]:
    """Each run's cells by task id, decoded from the compact grid as its schema says."""
    legend, tried = grid["legend"], set(grid["tried"])
    out = []
    for run in grid["runs"]:
        cells: dict[str, dict[str, Any]] = {}
        for row, (task_id, code) in enumerate(zip(grid["task_ids"], run["states"], strict=True)):
            if code == "-":
                continue
            state = legend[int(code, 36)]
            mapped = run["mapped"].get(str(row))
            cells[task_id] = {
                "state": state,
                "try_number": run["tries"].get(str(row), 1 if state in tried else 0),
                "mapped": mapped["count"] if mapped else None,
                "states": mapped["states"] if mapped else None,
            }
        out.append(cells)
    return out


def test_every_compact_cell_is_the_default_formats_cell(client: TestClient, db_url: str) -> None:
    # Given three runs: the oldest of an older version, the newest with a retry and a map
    old, _, new = _runs(db_url, 3)
    _write(db_url, lambda session: _seed(session, old, new))

    # When a user asks for both formats
    compact = client.get(f"{V1}/dags/demo/grid?format=compact&limit=3")
    cells = client.get(f"{V1}/dags/demo/grid?limit=3").json()

    # Then the compact grid is valid, and its cells are the default format's
    assert compact.status_code == 200 and compact.headers["content-type"] == "application/json"
    grid = CompactGrid.model_validate_json(compact.content).model_dump(mode="json")
    assert grid == compact.json()
    assert grid["legend"] == [str(s) for s in SUMMARY_ORDER]
    assert grid["tried"] == [s for s in grid["legend"] if s in TRIED]
    assert {"up_for_retry", "up_for_reschedule"} <= set(grid["tried"])
    rows = ["extract", "audit", "transform", "load", "gone"]
    assert grid["task_ids"] == cells["task_ids"] == rows
    assert decoded(grid) == [run["cells"] for run in cells["runs"]]
    headers = (
        "run_id",
        "state",
        "run_type",
        "logical_date",
        "start_date",
        "end_date",
        "bundle_version",
        "version",
    )
    for run_c, run_d in zip(grid["runs"], cells["runs"], strict=True):
        assert {k: run_c[k] for k in headers} == {k: run_d[k] for k in headers}
    assert grid["active"] is cells["active"] is True
    # ... and spelled out: a missing TI, an unknown task, the retry, the mapped task
    oldest, middle, newest = grid["runs"]
    ok, none = TI.SUCCESS, TI.NONE
    assert oldest["states"] == codes(ok, None, ok, ok, TI.SKIPPED)
    assert oldest["tries"] == {} and oldest["mapped"] == {}
    assert middle["states"] == codes(none, none, none, none, None)
    assert middle["tries"] == {} and middle["mapped"] == {}
    # the retry; load shows its running index
    assert newest["states"][2:4] == codes(TI.UP_FOR_RETRY, TI.RUNNING)
    assert newest["tries"] == {"2": 2, "3": 3}
    assert newest["mapped"] == {"3": {"count": 3, "states": {"success": 2, "running": 1}}}


def test_runs_of_the_dags_own_tasks_show_each_cell_in_its_tasks_row(
    client: TestClient, db_url: str
) -> None:
    # Given two runs with exactly the DAG's tasks, each TI in a state of its own, some tries
    # unusual; the rows' order (extract, audit, transform, load) is not the ids' sort order
    first, second = _runs(db_url, 2)
    tasks = ("extract", "audit", "transform", "load")
    seeded = {
        first: [(TI.SUCCESS, 1), (TI.FAILED, 2), (TI.UP_FOR_RETRY, 2), (TI.RUNNING, 1)],
        second: [(TI.SKIPPED, 0), (TI.UPSTREAM_FAILED, 0), (TI.SUCCESS, 4), (TI.QUEUED, 1)],
    }

    def seed(session: Session) -> None:
        for run, cells in seeded.items():
            for task, (state, try_number) in zip(tasks, cells, strict=True):
                _set(session, run, task, state, try_number)

    _write(db_url, seed)

    # When a user asks for the whole compact grid, and for the cells
    with sent_statements(client) as sent:
        grid = client.get(f"{V1}/dags/demo/grid?format=compact&limit=2").json()
    cells = client.get(f"{V1}/dags/demo/grid?limit=2").json()

    # Then each cell is in its task's row, with its state and its unusual try
    assert decoded(grid) == [run["cells"] for run in cells["runs"]]
    older, newer = grid["runs"]
    assert older["states"] == codes(*(state for state, _ in seeded[first]))
    assert newer["states"] == codes(*(state for state, _ in seeded[second]))
    assert older["tries"] == {"1": 2, "2": 2} and newer["tries"] == {"2": 4}
    assert older["mapped"] == newer["mapped"] == {}
    if db_url.startswith("postgresql"):  # read in the unique index's order: no join
        assert not any("FULL JOIN" in s for s in sent)


def test_the_legend_has_every_state_once_and_the_odd_codes_stay_apart() -> None:
    # The compact format, its SQL and its decoders follow SUMMARY_ORDER: each state of a TI
    # must be in it (else its cells read as no TI), and its unusual-try codes must never be
    # codes (an eleventh state's 'a' is not an odd 'A')
    count = len(SUMMARY_ORDER)
    assert sorted(SUMMARY_ORDER) == sorted(TI) and len(set(SUMMARY_ORDER)) == count
    assert sorted(grid.BY_FREQUENCY) == sorted(SUMMARY_ORDER)
    assert set(SUMMARY_ORDER) >= grid.TRIED
    assert count <= len(grid.ODD_CODES)
    assert not set(grid.CODES[:count]) & set(grid.ODD_CODES[:count])
    assert all(int(grid.CODE_OF[s], 36) == i for i, s in enumerate(SUMMARY_ORDER))
    for state in SUMMARY_ORDER:
        odd = grid.ODD_CODE_OF[state]
        assert grid._ODD.fullmatch(odd) and not grid._ODD.fullmatch(grid.CODE_OF[state])
        assert odd.translate(grid._UNSHIFT) == grid.CODE_OF[state]


def test_states_past_the_tenth_and_their_unusual_tries(client: TestClient, db_url: str) -> None:
    # Given a run with exactly the DAG's tasks (read in index order on PostgreSQL), its TIs
    # in a state past the tenth (removed: a letter, 'a' when there were eleven states) and
    # up_for_reschedule, with usual and unusual tries; and a run whose `load` is mapped
    # over both states (read by a join)
    first, second = _runs(db_url, 2)
    tasks = ("extract", "audit", "transform", "load")
    rows = [(TI.UP_FOR_RESCHEDULE, 1), (TI.REMOVED, 0), (TI.REMOVED, 1), (TI.UP_FOR_RESCHEDULE, 0)]

    def seed(session: Session) -> None:
        for task, (state, try_number) in zip(tasks, rows, strict=True):
            _set(session, first, task, state, try_number)
        _set(session, second, "extract", TI.UP_FOR_RESCHEDULE, 2)
        _set(session, second, "audit", TI.SUCCESS, 1)
        _set(session, second, "transform", TI.REMOVED, 0)
        session.execute(
            update(TaskInstance)
            .where(TaskInstance.dag_run_id == second, TaskInstance.task_id == "load")
            .values(map_index=0, state=TI.REMOVED, try_number=0)
        )
        _add(session, second, "load", 1, TI.UP_FOR_RESCHEDULE, 1)

    _write(db_url, seed)

    # When a user asks for the compact grid (whole, and its first rows) and for the cells
    grid = client.get(f"{V1}/dags/demo/grid?format=compact&limit=2").json()
    window = client.get(f"{V1}/dags/demo/grid?format=compact&limit=2&rows=3").json()
    cells = client.get(f"{V1}/dags/demo/grid?limit=2").json()

    # Then each cell decodes to the default format's, every code a base-36 index of legend
    assert decoded(grid) == [run["cells"] for run in cells["runs"]]
    assert decoded(window) == [
        {t: c for t, c in r.items() if t in tasks[:3]} for r in decoded(grid)
    ]
    older, newer = grid["runs"]
    resched, removed = TI.UP_FOR_RESCHEDULE, TI.REMOVED
    assert grid["legend"].index(removed) >= 10
    assert older["states"] == codes(resched, removed, removed, resched)
    assert older["tries"] == {"2": 1, "3": 0}
    assert newer["states"] == codes(resched, TI.SUCCESS, removed, resched)  # load's first
    assert newer["tries"] == {"0": 2}
    assert newer["mapped"] == {"3": {"count": 2, "states": {"removed": 1, "up_for_reschedule": 1}}}


@pytest.mark.parametrize(
    ("rows", "task_ids", "total"),
    [
        (1, ["extract"], None),
        (3, ["extract", "audit", "transform"], None),
        (4, ["extract", "audit", "transform", "load"], 5),  # the whole read: all counted
        (5, ["extract", "audit", "transform", "load", "gone"], 5),
        (50, ["extract", "audit", "transform", "load", "gone"], 5),
    ],
)
def test_the_first_rows_of_the_compact_grid_are_the_whole_grids(
    client: TestClient, db_url: str, rows: int, task_ids: list[str], total: int | None
) -> None:
    # Given the runs of the cases (an older version's task, a retry, a mapped task)
    old, _, new = _runs(db_url, 3)
    _write(db_url, lambda session: _seed(session, old, new))

    # When the web UI asks for the first rows only
    window = client.get(f"{V1}/dags/demo/grid?format=compact&limit=3&rows={rows}")
    whole = client.get(f"{V1}/dags/demo/grid?format=compact&limit=3").json()

    # Then it gets those rows of the whole grid, cell for cell, and how many rows there are
    assert window.status_code == 200
    grid = CompactGrid.model_validate_json(window.content).model_dump(mode="json")
    assert grid["task_ids"] == task_ids
    wanted = [{t: c for t, c in run.items() if t in task_ids} for run in decoded(whole)]
    assert decoded(grid) == wanted
    # a window ending within the DAG's own tasks has not looked for older versions' rows
    # (PostgreSQL: the DAG's tasks are the total), or has (SQLite reads the whole grid)
    assert grid["rows_total"] == (total or (4 if db_url.startswith("postgresql") else 5))
    assert whole["rows_total"] == 5


def test_a_mapped_task_with_its_placeholder_left_is_one_cell(
    client: TestClient, db_url: str
) -> None:
    # Given a mapped task whose placeholder (index -1) stayed beside its indexes
    [run] = _runs(db_url, 1)

    def seed(session: Session) -> None:
        _set(session, run, "load", TI.UPSTREAM_FAILED, 0)
        _add(session, run, "load", 0, TI.FAILED, 1)

    _write(db_url, seed)

    grid = client.get(f"{V1}/dags/demo/grid?format=compact").json()
    cells = client.get(f"{V1}/dags/demo/grid").json()

    assert decoded(grid) == [r["cells"] for r in cells["runs"]]
    [only] = grid["runs"]
    assert only["states"][3] == codes(TI.FAILED) and only["tries"] == {}
    assert only["mapped"] == {"3": {"count": 2, "states": {"failed": 1, "upstream_failed": 1}}}


def test_the_compact_grid_of_a_dag_without_runs(client: TestClient) -> None:
    grid = client.get(f"{V1}/dags/demo/grid?format=compact").json()

    assert grid["runs"] == [] and grid["active"] is False
    assert grid["task_ids"] == ["extract", "audit", "transform", "load"]


def test_format_cells_is_the_default(client: TestClient, db_url: str) -> None:
    _runs(db_url, 2)

    plain = client.get(f"{V1}/dags/demo/grid")
    cells = client.get(f"{V1}/dags/demo/grid?format=cells")

    assert plain.status_code == cells.status_code == 200
    assert plain.content == cells.content
    assert set(plain.json()["runs"][0]) == {
        "run_id",
        "state",
        "run_type",
        "logical_date",
        "start_date",
        "end_date",
        "bundle_version",
        "version",
        "cells",
    }


def test_the_compact_grid_of_an_unknown_dag_is_404(client: TestClient) -> None:
    response = client.get(f"{V1}/dags/nope/grid?format=compact")

    assert response.status_code == 404
    assert "nope" in response.json()["detail"]


@pytest.mark.parametrize(
    "query", ["format=dense", "format=", "format=COMPACT", "limit=0", "rows=0", "rows=x"]
)
def test_a_bad_grid_parameter_is_422(client: TestClient, query: str) -> None:
    response = client.get(f"{V1}/dags/demo/grid?{query}")

    assert response.status_code == 422


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)  # SQLite has no INCLUDE
def test_finished_runs_are_read_from_the_key_alone_on_postgresql(
    client: TestClient, db_url: str
) -> None:
    # Given three finished runs of the DAG's own tasks, their pages vacuumed as
    # autovacuum leaves a finished run's
    runs = _runs(db_url, 3)

    def finish(session: Session) -> None:
        for run in runs:
            for task in ("extract", "audit", "transform", "load"):
                _set(session, run, task, TI.SUCCESS, 1)

    _write(db_url, finish)
    engine = create_engine(db_url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(text("VACUUM (ANALYZE) task_instance"))
            # When the grid's read of a run's TIs in the key's order is planned and run
            conn.execute(text("SET enable_seqscan = off"))  # 12 rows: a scan would do
            conn.execute(text("SET enable_bitmapscan = off"))  # as the grid sets it
            plan = "\n".join(
                row[0]
                for row in conn.execute(
                    text(f"EXPLAIN (ANALYZE, COSTS OFF) {grid._INDEXED_TEXT}"),
                    {"runs": runs, "task_ids": "extract,audit,transform,load"},
                )
            )
    finally:
        engine.dispose()

    # Then the key's index alone gives each TI's state and try: no row read from the table
    assert "Index Only Scan using uq_task_instance_run_task_map" in plan, plan
    assert "Heap Fetches: 0" in plan, plan
    # and the grid shows them
    compact = client.get(f"{V1}/dags/demo/grid?format=compact&limit=3").json()
    assert [r["states"] for r in compact["runs"]] == [codes(*[TI.SUCCESS] * 4)] * 3
