"""Task groups on the DAG page in headless Chromium: a group is one row of the grid and
one box of the graph, closed at first, in the most pressing state of its tasks; opening
it shows its tasks (nested groups too), and closing it hides them again. The run is made
by a real `sluice scheduler` and `sluice worker`; the API served by uvicorn.

Skipped with the reason when Chromium or Playwright is missing, unless CI=true.
"""

from __future__ import annotations

from typing import Any

from sluice.scheduler.api.config import ApiConfig
from sluice.scheduler.core.settings import Settings
from tests.api.conftest import TOKEN
from tests.api.test_browser import ServedApi, browser, new_page
from tests.procs import Sluice

__all__ = ["browser"]  # the fixture

DAGS = """
from sluice import DAG, TaskGroup, task

with DAG("grouped", schedule=None):
    @task
    def start():
        pass

    with TaskGroup("extract") as extract:
        @task
        def load():
            pass

        with TaskGroup("inner"):
            @task
            def deep():
                raise RuntimeError("deep fails")

    @task
    def after():
        pass

    start() >> extract >> after()
"""


def test_a_group_is_one_row_and_one_box_that_open(browser: Any, sluice: Sluice) -> None:
    from playwright.sync_api import expect

    (sluice.dags_folder / "grouped.py").write_text(DAGS)
    sluice.scheduler()
    sluice.worker()
    run_id = sluice.trigger("grouped", "--run-id", "g1")
    assert sluice.wait_run("grouped", run_id) == "failed"
    settings = Settings(
        database_url=sluice.database_url, broker_url=sluice.broker_url, namespace=sluice.namespace
    )
    with ServedApi(settings, ApiConfig(token=TOKEN)) as api:
        page, errors = new_page(browser)
        try:
            page.goto(api.url + "/dags/grouped")
            grid = page.locator("#grid tbody")
            # closed: the group's row, its state the most pressing of its tasks'
            group = grid.locator('tr.group-row[data-group="extract"]')
            expect(group).to_be_visible()
            expect(group.locator("button.group-cell")).to_have_attribute("data-state", "failed")
            expect(grid.locator('tr[data-task="extract.load"]')).to_have_count(0)
            expect(grid.locator('tr[data-task="start"]')).to_have_count(1)
            expect(grid.locator('tr[data-task="after"]')).to_have_count(1)
            # the graph: one box for the closed group
            box = page.locator('#graph button.gnode[data-task="group:extract"]')
            expect(box).to_contain_text("extract (group)")
            expect(box).to_have_attribute("data-state", "failed")
            expect(page.locator('#graph button.gnode[data-task="extract.load"]')).to_have_count(0)
            # opened: its tasks and its nested group's row; the graph draws its tasks
            group.locator("button.group-toggle").click()
            expect(group.locator("button.group-toggle")).to_have_attribute("aria-expanded", "true")
            expect(grid.locator('tr[data-task="extract.load"]')).to_have_count(1)
            inner = grid.locator('tr.group-row[data-group="extract.inner"]')
            expect(inner).to_be_visible()
            expect(grid.locator('tr[data-task="extract.inner.deep"]')).to_have_count(0)
            inner.locator("button.group-toggle").click()
            deep = grid.locator('tr[data-task="extract.inner.deep"] button.cell')
            expect(deep).to_have_attribute("data-state", "failed")
            expect(page.locator('#graph button.gnode[data-task="extract.load"]')).to_have_count(1)
            expect(page.locator('#graph button.gnode[data-task="group:extract"]')).to_have_count(0)
            # closed again: hidden again
            group.locator("button.group-toggle").click()
            expect(grid.locator('tr[data-task="extract.load"]')).to_have_count(0)
            expect(box).to_be_visible()
            assert errors == [], errors
        finally:
            page.close()
