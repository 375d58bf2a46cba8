"""A human approval in headless Chromium: a task deferred on `Event(key)` shows its trigger
in the task panel, and Approve (with a payload typed in the panel) resumes it with that
payload. Real `sluice scheduler` and `sluice worker`, the API served by uvicorn.

Skipped with the reason when Chromium or Playwright is missing, unless CI=true.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from sluice.scheduler.api.config import ApiConfig
from sluice.scheduler.core.settings import Settings
from tests.api.conftest import TOKEN
from tests.api.test_browser import ServedApi, browser, new_page
from tests.integration.test_deferral import count_in
from tests.procs import Sluice, wait_until

__all__ = ["browser"]  # the fixture

APPROVAL_DAG = """
import json, pathlib
import sluice
from sluice import DAG, task
from sluice.triggers import Event

with DAG("web_approval", schedule=None) as dag:
    @task
    def deploy(context):
        event = context["trigger_event"]
        if event is None:
            sluice.defer(Event("deploy-ok"))
        pathlib.Path(RECORD_PATH).write_text(json.dumps(event))
"""


def test_approve_in_the_panel_resumes_the_task_with_the_payload(
    browser: Any, sluice: Sluice, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    # Given a run whose task waits on Event("deploy-ok")
    record = tmp_path / "event.json"
    (sluice.dags_folder / "approval_dag.py").write_text(
        APPROVAL_DAG.replace("RECORD_PATH", repr(str(record)))
    )
    sluice.scheduler()
    sluice.worker()
    run_id = sluice.trigger("web_approval", "--run-id", "approval-1")
    wait_until(lambda: count_in(sluice, "SELECT count(*) FROM trigger") == 1, timeout=60)
    settings = Settings(
        database_url=sluice.database_url, broker_url=sluice.broker_url, namespace=sluice.namespace
    )
    with ServedApi(settings, ApiConfig(token=TOKEN)) as api:
        page, errors = new_page(browser)
        try:
            page.goto(api.url + "/dags/web_approval")
            page.fill("#token", TOKEN)
            page.click("#token-form button")
            cell = page.locator('button.cell[data-task="deploy"][data-run="approval-1"]')
            expect(cell).to_have_attribute("data-state", "deferred")
            # When its panel is opened: the trigger, its key, since when, no timeout
            cell.click()
            box = page.locator("#panel-trigger")
            expect(box).to_be_visible()
            expect(box).to_contain_text("sluice.tasks.triggers.Event")
            expect(box).to_contain_text('{"key":"deploy-ok"}')
            expect(box).to_contain_text("no timeout")
            # And Approve is clicked with a payload (set as text: no markup runs)
            page.fill("#event-payload", '{"by": "<b>ann</b>", "approved": false}')
            page.get_by_role("button", name="Approve").click()
            expect(page.locator("#event-result")).to_contain_text(
                "Approved (event deploy-ok): resumed 1 task instance(s)."
            )
            # Then the task runs again, with the payload, and the panel's trigger goes
            expect(cell).to_have_attribute("data-state", "success", timeout=60_000)
            expect(box).to_be_hidden()
        except Exception as exc:
            page.screenshot(path=str(tmp_path / "failure.png"), full_page=True)
            raise AssertionError(
                f"UI test failed ({exc}); see {tmp_path}/failure.png\n{sluice.logs()}"
            ) from exc
        finally:
            if os.environ.get("SLUICE_UI_SCREENSHOT"):
                page.screenshot(path=os.environ["SLUICE_UI_SCREENSHOT"], full_page=True)
        assert errors == []
    assert sluice.wait_run("web_approval", run_id) == "success", sluice.logs()
    # Approve always sends approved: true, whatever was typed
    assert json.loads(record.read_text()) == {"by": "<b>ann</b>", "approved": True}
