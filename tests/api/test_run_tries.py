"""`GET …/runs/{run_id}/tries`: each try of a run's task instances with the times the
database keeps (what the run's Gantt chart draws), on PostgreSQL and on SQLite.

The run is made as a trigger makes it (`create_dagrun`); its TIs and log rows are then
written as the scheduler and the workers leave them in the cases the chart must show: a
success, a retry running (its first try logged), a retry queued after a silent first try,
a cleared task, and a mapped task's indexes. No broker: the route reads the database only.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import insert, update
from sqlalchemy.orm import Session

from sluice.scheduler.api import create_app
from sluice.scheduler.api.config import ApiConfig
from sluice.scheduler.core.db import make_engine, make_session_factory, transaction
from sluice.scheduler.core.models import Dag, DagRun, TaskInstance, TaskLog
from sluice.scheduler.core.settings import Settings
from sluice.scheduler.core.states import TI, RunType
from sluice.scheduler.scheduling.dagrun import create_dagrun

V1 = "/api/v1"
T0 = dt.datetime(2026, 3, 1, 12, 0, 0, tzinfo=dt.UTC)


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def iso(seconds: float | None) -> str | None:
    return None if seconds is None else at(seconds).isoformat().replace("+00:00", "Z")


@pytest.fixture
def client(db_url: str) -> Iterator[TestClient]:
    settings = Settings(database_url=db_url, namespace=f"t{uuid.uuid4().hex[:8]}")
    with TestClient(create_app(settings, config=ApiConfig()), raise_server_exceptions=False) as c:
        yield c


def write(url: str, change: Callable[[Session, DagRun], None]) -> None:
    """A manual run `r1` of `demo`, then `change(session, run)` in the same transaction."""
    engine = make_engine(url)
    try:
        with transaction(make_session_factory(engine)) as session:
            dag = session.get(Dag, "demo")
            assert dag is not None
            run = create_dagrun(
                session, dag, run_type=RunType.MANUAL, logical_date=T0, now=T0, run_id="r1"
            )
            session.flush()
            change(session, run)
    finally:
        engine.dispose()


def ti_id(session: Session, run: DagRun, task_id: str) -> int:
    found = session.query(TaskInstance.id).filter_by(dag_run_id=run.id, task_id=task_id).scalar()
    assert found is not None
    return int(found)


def stamp(session: Session, run: DagRun, task_id: str, **values: Any) -> None:
    session.execute(
        update(TaskInstance)
        .where(TaskInstance.dag_run_id == run.id, TaskInstance.task_id == task_id)
        .values(**values)
    )


def logged(session: Session, ti: int, try_number: int, start: float, end: float | None) -> None:
    """The log row a worker leaves for a try that printed something."""
    session.execute(
        insert(TaskLog).values(
            ti_id=ti,
            try_number=try_number,
            attempt_id=str(uuid.uuid4()),
            hostname=f"worker-{try_number}",
            content="a line",
            dropped_lines=0,
            started_at=at(start),
            updated_at=at(end if end is not None else start),
            finished_at=None if end is None else at(end),
        )
    )


def seed(session: Session, run: DagRun) -> None:
    # extract: one try, done.
    stamp(session, run, "extract", state=TI.SUCCESS, try_number=1, hostname="w1",
          queued_at=at(0), start_date=at(1), end_date=at(3))  # fmt: skip
    # transform: try 1 failed (its log kept), try 2 running on w2.
    stamp(session, run, "transform", state=TI.RUNNING, try_number=2, hostname="w2",
          queued_at=at(6), start_date=at(7), end_date=None)  # fmt: skip
    logged(session, ti_id(session, run, "transform"), 1, 4, 5)
    # audit: try 1 printed nothing and failed; try 2 is queued: the row still holds try
    # 1's start and end, older than try 2's queueing.
    stamp(session, run, "audit", state=TI.QUEUED, try_number=2, hostname=None,
          queued_at=at(9), start_date=at(3.5), end_date=at(4.5))  # fmt: skip
    # load: mapped over three indexes (written out of order); index 1 was cleared after
    # its try ended (the clear forgets the end; its log kept it), index 2 never ran.
    stamp(session, run, "load", map_index=2, state=TI.NONE, try_number=0)
    for index, values in ((1, {"try_number": 1, "queued_at": at(2), "start_date": at(2.5)}),
                          (0, {"try_number": 1, "queued_at": at(2), "start_date": at(2.2),
                               "end_date": at(2.4), "state": TI.SUCCESS})):  # fmt: skip
        session.execute(
            insert(TaskInstance).values(
                dag_run_id=run.id,
                dag_id=run.dag_id,
                run_id=run.run_id,
                task_id="load",
                map_index=index,
                state=values.pop("state", TI.NONE),
                **values,
            )
        )
    load_1 = session.query(TaskInstance.id).filter_by(dag_run_id=run.id, map_index=1).scalar()
    logged(session, int(load_1), 1, 2.6, 2.9)


def one_try(n: int, state: str | None, host: str | None, q: Any, s: Any, e: Any) -> dict:
    return {
        "try_number": n,
        "state": state,
        "hostname": host,
        "queued_at": iso(q),
        "started_at": iso(s),
        "finished_at": iso(e),
    }


def test_each_try_of_the_run_with_its_queued_start_and_end(client: TestClient, db_url: str) -> None:
    # Given a run whose task instances are in the cases above
    write(db_url, seed)

    # When the Gantt chart asks for the run's tries
    response = client.get(f"{V1}/dags/demo/runs/r1/tries")

    # Then every task instance is listed in the DAG's order with each of its tries
    assert response.status_code == 200, response.text
    body = response.json()
    assert {k: body[k] for k in ("dag_id", "run_id", "state", "total", "limit", "offset")} == {
        "dag_id": "demo",
        "run_id": "r1",
        "state": "queued",
        "total": 6,
        "limit": 500,
        "offset": 0,
    }
    rows = [
        (t["task_id"], t["map_index"], t["state"], t["try_number"]) for t in body["task_instances"]
    ]
    assert rows == [
        ("extract", None, "success", 1),
        ("audit", None, "queued", 2),
        ("transform", None, "running", 2),
        ("load", 0, "success", 1),
        ("load", 1, "none", 1),
        ("load", 2, "none", 0),
    ]
    tries = {(t["task_id"], t["map_index"]): t["tries"] for t in body["task_instances"]}
    assert tries[("extract", None)] == [one_try(1, "success", "w1", 0, 1, 3)]
    # an earlier try: its log's start and end, its host; its queue time is not kept
    assert tries[("transform", None)] == [
        one_try(1, None, "worker-1", None, 4, 5),
        one_try(2, "running", "w2", 6, 7, None),
    ]
    # a silent earlier try: the row's stamps older than the new queueing are its own
    assert tries[("audit", None)] == [
        one_try(1, None, None, None, 3.5, 4.5),
        one_try(2, "queued", None, 9, None, None),
    ]
    assert tries[("load", 0)] == [one_try(1, "success", None, 2, 2.2, 2.4)]
    # cleared: the try's state is gone, its end is its log's
    assert tries[("load", 1)] == [one_try(1, None, "worker-1", 2, 2.5, 2.9)]
    assert tries[("load", 2)] == []


def test_a_page_of_task_instances(client: TestClient, db_url: str) -> None:
    write(db_url, seed)

    page = client.get(f"{V1}/dags/demo/runs/r1/tries?limit=2&offset=3").json()

    assert (page["total"], page["limit"], page["offset"]) == (6, 2, 3)
    assert [(t["task_id"], t["map_index"]) for t in page["task_instances"]] == [
        ("load", 0),
        ("load", 1),
    ]
    past = client.get(f"{V1}/dags/demo/runs/r1/tries?offset=6").json()
    assert past["total"] == 6 and past["task_instances"] == []


@pytest.mark.parametrize(
    ("query", "status", "detail"),
    [
        ("", 404, "DAG 'demo' has no run 'nope'"),
        ("?limit=0", 422, "query.limit: Input should be greater than or equal to 1"),
        ("?limit=1001", 422, "query.limit: Input should be less than or equal to 1000"),
        ("?offset=-1", 422, "query.offset: Input should be greater than or equal to 0"),
        ("?limit=ten", 422, "query.limit: Input should be a valid integer"),
    ],
)
def test_bad_requests_get_one_line(
    client: TestClient, db_url: str, query: str, status: int, detail: str
) -> None:
    write(db_url, seed)
    run_id = "nope" if status == 404 else "r1"

    response = client.get(f"{V1}/dags/demo/runs/{run_id}/tries{query}")

    assert response.status_code == status
    assert response.json()["detail"].startswith(detail), response.json()


def test_an_unknown_dag_is_404(client: TestClient) -> None:
    response = client.get(f"{V1}/dags/ghost/runs/r1/tries")
    assert response.status_code == 404
    # the test DAGs folder holds a file that fails to import: the 404 names it
    assert response.json()["detail"].startswith("unknown DAG 'ghost'; broken_dag.py failed")


def test_the_spec_documents_the_route_and_its_errors(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    operation = spec["paths"][f"{V1}/dags/{{dag_id}}/runs/{{run_id}}/tries"]["get"]
    assert set(operation["responses"]) == {"200", "400", "401", "403", "404", "413", "422", "503"}
    params = {p["name"]: p["schema"] for p in operation["parameters"] if p["in"] == "query"}
    assert params["limit"]["maximum"] == 1000 and params["limit"]["minimum"] == 1
    assert params["offset"]["minimum"] == 0
    ok = operation["responses"]["200"]["content"]["application/json"]["schema"]
    assert ok == {"$ref": "#/components/schemas/RunTries"}
