"""`GET …/runs/{run_id}/tasks` on a run of 2,000 mapped task instances answered all 2,000
at once. It answers pages as the runs list does: `limit` (default 100, at most the runs
list's 500, above it the runs list's 422), `offset`, and the total; the web UI still shows
what it showed (the first 500 indexes of a mapped task, and how many more there are).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from sluice.scheduler.api.config import ApiConfig
from sluice.scheduler.core.states import TI
from tests.api.conftest import TOKEN, client_for
from tests.api.test_browser import ServedApi, launched_browser, new_page
from tests.operators.helpers import World

V1 = "/api/v1"
TASKS = f"{V1}/dags/wide/runs/wide-1/tasks"
INDEXES = 2000

WIDE = """
with DAG("wide", schedule=None) as dag:
    @task
    def items():
        return []

    @task
    def load(x):
        return x

    @task
    def total(values):
        return values

    total(load.expand(x=items()))
"""


@pytest.fixture
def wide(pg_url: str, tmp_path: Path) -> Iterator[World]:
    """A run `wide-1` whose mapped task `load` was expanded to 2,000 indexes by a
    scheduling decision, as a scheduler makes it: 2,002 task instances."""
    folder = tmp_path / "dags"
    folder.mkdir()
    world = World(pg_url, folder)
    world.dags(WIDE)
    world.trigger("wide", "wide-1")
    world.advance("wide", "wide-1", "items", TI.SUCCESS, result=json.dumps(list(range(INDEXES))))
    world.decide("wide", "wide-1")
    yield world
    world.close()


@pytest.fixture
def api(wide: World) -> Iterator[TestClient]:
    yield from client_for(wide.settings, ApiConfig(token=TOKEN))


def keys(page: dict[str, Any]) -> list[tuple[str, int | None]]:
    return [(t["task_id"], t["map_index"]) for t in page["task_instances"]]


def test_a_run_of_2000_mapped_tis_answers_a_page_of_100(api: TestClient) -> None:
    page = api.get(TASKS).json()

    assert (page["total"], page["limit"], page["offset"]) == (INDEXES + 2, 100, 0)
    assert keys(page) == [("items", None)] + [("load", i) for i in range(99)]


def test_the_pages_hold_every_ti_once_in_the_dag_s_order(api: TestClient) -> None:
    seen: list[tuple[str, int | None]] = []
    offset = 0
    while True:
        page = api.get(TASKS, params={"limit": 500, "offset": offset}).json()
        assert page["total"] == INDEXES + 2 and page["limit"] == 500
        seen += keys(page)
        offset += 500
        if offset >= page["total"]:
            break
    expected = [("items", None)] + [("load", i) for i in range(INDEXES)] + [("total", None)]
    assert seen == expected


def test_filters_page_and_count_what_they_keep(api: TestClient) -> None:
    page = api.get(TASKS, params={"task_id": "load", "offset": 1990}).json()
    assert (page["total"], page["offset"]) == (INDEXES, 1990)
    assert keys(page) == [("load", i) for i in range(1990, 2000)]
    one = api.get(TASKS, params={"map_index": 7}).json()
    assert (one["total"], keys(one)) == (1, [("load", 7)])
    past = api.get(TASKS, params={"offset": 5000}).json()
    assert (past["total"], past["task_instances"]) == (INDEXES + 2, [])


def test_limit_above_the_runs_list_maximum_is_answered_as_the_runs_list_answers(
    api: TestClient,
) -> None:
    runs = api.get(f"{V1}/dags/wide/runs", params={"limit": 501})
    tasks = api.get(TASKS, params={"limit": 501})
    assert runs.status_code == tasks.status_code == 422
    assert tasks.json()["detail"] == runs.json()["detail"]
    for bad in ({"limit": 0}, {"offset": -1}, {"limit": "x"}):
        assert api.get(TASKS, params=bad).status_code == 422, bad
    spec = api.get("/openapi.json").json()["paths"]
    limits = {
        path: {p["name"]: p["schema"] for p in spec[path]["get"]["parameters"]}["limit"]
        for path in ("/api/v1/dags/{dag_id}/runs", "/api/v1/dags/{dag_id}/runs/{run_id}/tasks")
    }
    runs_limit, tasks_limit = limits.values()
    assert tasks_limit["maximum"] == runs_limit["maximum"] == 500
    assert tasks_limit["default"] == 100


@pytest.fixture
def browser() -> Iterator[Any]:
    yield from launched_browser()


def test_the_ui_shows_500_indexes_and_counts_the_rest(
    browser: Any, wide: World, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    with ServedApi(wide.settings, ApiConfig(token=TOKEN)) as served:
        page, errors = new_page(browser)
        try:
            page.goto(served.url + "/")
            page.fill("#token", TOKEN)
            page.click("#token-form button")
            page.goto(served.url + "/dags/wide")
            load = page.locator('button.cell[data-task="load"][data-run="wide-1"]')
            expect(load).to_have_attribute("data-mapped", str(INDEXES))
            load.click()
            indexes = page.locator("#panel-indexes button")
            expect(indexes).to_have_count(500)
            expect(indexes.last).to_have_attribute("data-index", "499")
            expect(page.locator("#panel-indexes")).to_contain_text("and 1500 more")
            expect(page.locator("#panel-title")).to_have_text("load [0] · wide-1")
        except Exception as exc:
            page.screenshot(path=str(tmp_path / "failure.png"), full_page=True)
            raise AssertionError(f"UI test failed ({exc}); see {tmp_path}/failure.png") from exc
        assert errors == []
