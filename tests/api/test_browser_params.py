"""The trigger form of a DAG with params, in headless Chromium: a field per param (its type,
default and description), whose values are sent typed; a refusal said in one line; the raw
JSON conf as the fallback. Real `sluice scheduler` and `sluice worker`, the API served by
uvicorn.

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
from tests.integration.test_cancel_run import rows
from tests.procs import Sluice

__all__ = ["browser"]  # the fixture

PARAMS_DAG = """
from sluice import DAG, Param, task

with DAG("web_params", schedule=None, params={
    "n": Param(10, type="integer", minimum=1, description="how many rows to load"),
    "day": Param(type="string", format="date", description="the day to load"),
    "mode": Param("fast", enum=["fast", "full"]),
    "dry": Param(False, type="boolean"),
    "tags": Param(["a"], type="array", items={"type": "string"}),
}) as dag:
    @task
    def load(context):
        return {"params": context["params"], "conf": context["conf"]}
"""


def conf_of(sluice: Sluice, run_id: str) -> Any:
    found = rows(
        sluice.database_url,
        f"SELECT conf FROM dag_run WHERE dag_id = 'web_params' AND run_id = '{run_id}'",
    )
    return found[0][0] if found else None


def result_of(sluice: Sluice, run_id: str) -> Any:
    found = rows(
        sluice.database_url,
        f"SELECT result FROM task_instance WHERE dag_id = 'web_params' AND run_id = '{run_id}'",
    )
    value = found[0][0]
    return json.loads(value) if isinstance(value, str) else value


def test_the_trigger_form_has_a_field_per_param_and_sends_typed_values(
    browser: Any, sluice: Sluice, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    (sluice.dags_folder / "params_dag.py").write_text(PARAMS_DAG)
    sluice.run("dags", "list")  # parse the DAG file now
    sluice.scheduler()
    sluice.worker()
    settings = Settings(
        database_url=sluice.database_url, broker_url=sluice.broker_url, namespace=sluice.namespace
    )
    with ServedApi(settings, ApiConfig(token=TOKEN)) as api:
        page, errors = new_page(browser)
        try:
            page.goto(api.url + "/dags/web_params")
            page.fill("#token", TOKEN)
            page.click("#token-form button")
            expect(page.locator("h1")).to_have_text("web_params")

            # The form: a field per param, its type, default and description; no raw JSON
            fields = page.locator("#param-fields")
            expect(fields).to_be_visible()
            expect(page.locator("#conf")).to_be_hidden()
            n = page.locator('[data-param="n"]')
            expect(n).to_have_attribute("type", "number")
            expect(n).to_have_value("10")
            expect(page.get_by_label("n (integer, ≥ 1, default 10)")).to_have_count(1)
            expect(fields).to_contain_text("how many rows to load")
            day = page.locator('[data-param="day"]')
            expect(day).to_have_attribute("type", "date")
            expect(fields).to_contain_text("day (string, date, required)")
            mode = page.locator('[data-param="mode"]')
            expect(mode.locator("option:checked")).to_have_text("fast")
            expect(page.locator('[data-param="dry"]')).not_to_be_checked()
            expect(page.locator('[data-param="tags"]')).to_have_value('["a"]')

            # A value the param refuses: the API's line, and no run
            n.fill("0")
            day.fill("2026-03-01")
            page.fill("#run-id", "ui-params-0")
            page.get_by_role("button", name="Trigger").click()
            result = page.locator("#trigger-result")
            expect(result).to_have_text("param 'n': 0 is less than the minimum of 1")
            assert conf_of(sluice, "ui-params-0") is None

            # Typed values: a number, a choice, a boolean, a list
            n.fill("3")
            mode.select_option(label="full")
            page.check('[data-param="dry"]')
            page.locator('[data-param="tags"]').fill('["x", "y"]')
            page.fill("#run-id", "ui-params-1")
            page.get_by_role("button", name="Trigger").click()
            expect(result).to_contain_text("Triggered run ui-params-1")
            typed = {"n": 3, "day": "2026-03-01", "mode": "full", "dry": True, "tags": ["x", "y"]}
            assert conf_of(sluice, "ui-params-1") == typed

            # The raw JSON fallback: the fields' values, to which a key is added
            page.check("#conf-raw")
            expect(fields).to_be_hidden()
            raw = page.locator("#conf")
            expect(raw).to_be_visible()
            assert json.loads(raw.input_value()) == typed
            raw.fill(json.dumps({**typed, "n": 4, "extra": "kept"}))
            page.fill("#run-id", "ui-params-2")
            page.get_by_role("button", name="Trigger").click()
            expect(result).to_contain_text("Triggered run ui-params-2")
            # back to the form: its fields show the raw conf's params
            page.uncheck("#conf-raw")
            expect(n).to_have_value("4")
        except Exception as exc:
            page.screenshot(path=str(tmp_path / "failure.png"), full_page=True)
            raise AssertionError(
                f"UI test failed ({exc}); see {tmp_path}/failure.png\n{sluice.logs()}"
            ) from exc
        finally:
            if os.environ.get("SLUICE_UI_SCREENSHOT"):
                page.screenshot(path=os.environ["SLUICE_UI_SCREENSHOT"], full_page=True)
        assert errors == []
    assert sluice.wait_run("web_params", "ui-params-1") == "success", sluice.logs()
    assert result_of(sluice, "ui-params-1") == {"params": typed, "conf": typed}
    assert sluice.wait_run("web_params", "ui-params-2") == "success", sluice.logs()
    assert result_of(sluice, "ui-params-2") == {
        "params": {**typed, "n": 4},
        "conf": {**typed, "n": 4, "extra": "kept"},
    }
