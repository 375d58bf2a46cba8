"""The DAG page in headless Chromium shows what a DAG consumes and produces (its assets),
and the DAG list and the DAG page show a watched DAG's error. The DAGs are parsed by
`sluice dags list`; the API served by uvicorn.

Skipped with the reason when Chromium or Playwright is missing, unless CI=true.
"""

from __future__ import annotations

from typing import Any

from sluice.scheduler.api.config import ApiConfig
from sluice.scheduler.core.db import make_engine, make_session_factory, transaction, utcnow
from sluice.scheduler.core.models import DagWatch
from sluice.scheduler.core.settings import Settings
from tests.api.conftest import TOKEN
from tests.api.test_browser import ServedApi, browser, new_page
from tests.procs import Sluice

__all__ = ["browser"]  # the fixture

DAGS = """
import sluice
from sluice import DAG, task

raw = sluice.Asset("s3://bucket/raw/")

with DAG("makes_raw", schedule=None):
    @task(outlets=[raw, sluice.Asset("s3://bucket/<b>bold</b>")])
    def load():
        pass

with DAG("reads_raw", schedule=raw | sluice.Asset("s3://other/")):
    @task
    def read():
        pass

with DAG("watches", schedule=sluice.Watch(lambda context: [], interval=3600)):
    @task
    def each():
        pass
"""


def test_the_dag_page_shows_assets_and_a_watch_error(browser: Any, sluice: Sluice) -> None:
    from playwright.sync_api import expect

    (sluice.dags_folder / "assets_dag.py").write_text(DAGS)
    sluice.run("dags", "list")
    settings = Settings(
        database_url=sluice.database_url, broker_url=sluice.broker_url, namespace=sluice.namespace
    )
    engine = make_engine(settings.database_url)
    try:
        with transaction(make_session_factory(engine)) as session:
            watch = session.get(DagWatch, "watches")
            assert watch is not None
            watch.last_error = "RuntimeError: the bucket answered 403"
            watch.error_at = utcnow()
    finally:
        engine.dispose()
    with ServedApi(settings, ApiConfig(token=TOKEN)) as api:
        page, errors = new_page(browser)
        try:
            page.goto(api.url + "/dags/reads_raw")
            expect(page.locator("#dag-assets")).to_have_text(
                "consumes: s3://bucket/raw/, s3://other/"
            )
            page.goto(api.url + "/dags/makes_raw")
            # a URI is shown as text: no markup runs
            expect(page.locator("#dag-assets")).to_have_text(
                "produces: s3://bucket/<b>bold</b>, s3://bucket/raw/"
            )
            page.goto(api.url + "/dags/watches")
            expect(page.locator("#dag-assets")).to_have_text(
                "watch error: RuntimeError: the bucket answered 403"
            )
            page.goto(api.url + "/")
            expect(
                page.get_by_text("watch failed: RuntimeError: the bucket answered 403")
            ).to_be_visible()
            assert errors == [], errors
        finally:
            page.close()
