"""The web UI in headless Chromium (Debian's `chromium`, driven by Playwright), against a
real `sluice scheduler` and `sluice worker` and the API served by uvicorn.

Skipped with the reason when Chromium or Playwright is missing, unless CI=true.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import socket
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sluice.scheduler.api import create_app
from sluice.scheduler.api.config import ApiConfig
from sluice.scheduler.core.settings import Settings
from tests.api.conftest import TOKEN
from tests.integration.test_cancel_run import rows
from tests.procs import Sluice, wait_until

CHROMIUM = os.environ.get("SLUICE_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TRACE_URL = "http://traces.invalid/trace/{trace_id}"

UI_DAG = """
from sluice import DAG, task

with DAG("web_demo", schedule=None) as dag:
    @task
    def hello(context):
        print("hello from the browser test, who =", context["conf"].get("who"))
        return 1

    @task
    def bye():
        return 2

    hello >> bye
"""


def _browser_or_skip() -> Any:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        reason = f"playwright is not installed: {exc}"
    else:
        if shutil.which(CHROMIUM) or Path(CHROMIUM).exists():
            return sync_playwright
        reason = f"no Chromium at {CHROMIUM} (apt-get install chromium)"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (required under CI=true)")
    pytest.skip(reason)


class ServedApi:
    """The API app on uvicorn, in a thread of the test process, on a free loopback port."""

    def __init__(self, settings: Settings, config: ApiConfig) -> None:
        import uvicorn

        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        app = create_app(settings, config=config)
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )

    def __enter__(self) -> ServedApi:
        self.thread.start()
        wait_until(lambda: self.server.started, timeout=10)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()


def new_page(browser: Any) -> tuple[Any, list[str]]:
    """A page with a 15 s default timeout, and the list its JavaScript errors go to."""
    page = browser.new_page()
    page.set_default_timeout(15_000)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    return page, errors


def launched_browser() -> Iterator[Any]:
    """Headless Chromium for one test (the `browser` fixture), closed after it."""
    sync_playwright = _browser_or_skip()
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def browser() -> Iterator[Any]:
    yield from launched_browser()


def test_trigger_from_the_ui_and_read_the_log(browser: Any, sluice: Sluice, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    # Given a scheduler, a worker and the API serving the UI
    (sluice.dags_folder / "web_demo_dag.py").write_text(UI_DAG)
    sluice.run("dags", "list")  # parse the DAG file now
    sluice.scheduler()
    sluice.worker(concurrency=2)
    settings = Settings(
        database_url=sluice.database_url,
        broker_url=sluice.broker_url,
        namespace=sluice.namespace,
        heartbeat_timeout=5,
    )
    with ServedApi(settings, ApiConfig(token=TOKEN, trace_url=TRACE_URL)) as api:
        page, errors = new_page(browser)
        try:
            _walk_through(page, api.url, expect)
        except Exception as exc:
            page.screenshot(path=str(tmp_path / "failure.png"), full_page=True)
            raise AssertionError(
                f"UI test failed ({exc}); see {tmp_path}/failure.png\n{sluice.logs()}"
            ) from exc
        finally:
            if os.environ.get("SLUICE_UI_SCREENSHOT"):
                page.screenshot(path=os.environ["SLUICE_UI_SCREENSHOT"], full_page=True)
        assert errors == []
        # With a scheduler and a worker up, the health check sees both.
        with urllib.request.urlopen(api.url + "/api/v1/health", timeout=10) as response:
            health = json.loads(response.read())
        assert health["status"] == "ok", health
        assert health["schedulers_alive"] == 1 and health["workers"]["ok"] is True
        assert health["workers"]["seen"][0]["queues"] == ["callbacks", "default"]


def _put_note(url: str, note: str) -> None:
    request = urllib.request.Request(
        url,
        data=json.dumps({"note": note}).encode(),
        method="PUT",
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200


def _walk_through(page: Any, base: str, expect: Any) -> None:
    # The DAG list shows the DAG with its schedule and paused switch.
    page.goto(base + "/")
    row = page.locator('tr[data-dag="web_demo"]')
    expect(row).to_contain_text("manual only")
    expect(row.get_by_role("switch")).to_have_attribute("aria-checked", "false")

    # Save the token, open the DAG, and trigger a run with a conf from the form.
    page.fill("#token", TOKEN)
    page.click("#token-form button")
    expect(page.locator("#token-state")).to_have_text("token saved")
    row.get_by_role("link", name="web_demo").click()
    expect(page.locator("h1")).to_have_text("web_demo")
    page.fill("#run-id", "ui-run-1")
    page.fill("#conf", '{"who": "browser"}')
    page.get_by_role("button", name="Trigger").click()
    expect(page.locator("#trigger-result")).to_contain_text("Triggered run ui-run-1")

    # The grid turns green by itself: every cell of the run, with text, not colour alone.
    for task_id in ("hello", "bye"):
        cell = page.locator(f'button.cell[data-task="{task_id}"][data-run="ui-run-1"]')
        expect(cell).to_have_attribute("data-state", "success", timeout=60_000)
        expect(cell).to_have_text("ok")
        expect(cell).to_have_class(re.compile(r"\bstate-success\b"))
    expect(page.locator('th[data-run="ui-run-1"]')).to_have_attribute("data-state", "success")

    # Notes on the run and the task (through the API) show in the task's panel, as text.
    run_path = f"{base}/api/v1/dags/web_demo/runs/ui-run-1"
    _put_note(f"{run_path}/note", "run <b>note</b>")
    _put_note(f"{run_path}/tasks/hello/note", "the task's note")

    # Open the task: its try, host, attempt id, trace link and log line.
    page.locator('button.cell[data-task="hello"][data-run="ui-run-1"]').click()
    expect(page.locator("#panel-title")).to_have_text("hello · ui-run-1")
    expect(page.locator("#panel-note")).to_contain_text("the task's note")
    expect(page.locator("#panel-note")).to_contain_text("api (bearer token)")
    expect(page.locator("#panel-run-note")).to_contain_text("run <b>note</b>")
    expect(page.locator("#log")).to_contain_text("hello from the browser test, who = browser")
    expect(page.locator("#tries")).to_contain_text("Try 1 (success)")
    expect(page.locator("#panel-facts")).to_contain_text("Attempt id")
    href = page.locator("#trace-link").get_attribute("href")
    assert re.fullmatch(r"http://traces\.invalid/trace/[0-9a-f]{32}", href or ""), href

    # Clear it (two clicks): it runs again, try 2, and the grid is green again.
    page.click("#clear")
    page.click("#clear")
    expect(page.locator("#clear-result")).to_contain_text("Cleared 1 task instance(s)")
    expect(page.locator("#tries")).to_contain_text("Try 2 (success)", timeout=60_000)
    expect(page.locator("#log-meta")).to_contain_text("Try 2")
    expect(page.locator("#log")).to_contain_text("hello from the browser test")
    hello = page.locator('button.cell[data-task="hello"][data-run="ui-run-1"]')
    expect(hello).to_have_attribute("title", "hello in ui-run-1: success, try 2", timeout=30_000)
    expect(page.locator('th[data-run="ui-run-1"]')).to_have_attribute("data-state", "success")

    # A note typed in the panel is saved and shown, as text.
    page.fill("#note-text", "typed <i>here</i>")
    page.locator("#note-form button").click()
    expect(page.locator("#ops-result")).to_contain_text("Saved the note on task hello")
    expect(page.locator("#panel-note")).to_contain_text("typed <i>here</i>")

    # Mark it failed with its downstream (two clicks: the first only says what it will do).
    page.check("#clear-downstream")
    page.click("#mark-failed")
    expect(page.locator("#mark-failed")).to_contain_text("Click again to mark hello failed")
    page.click("#mark-failed")
    expect(page.locator("#clear-result")).to_contain_text("Marked 2 task instance(s) failed")
    expect(hello).to_have_attribute("data-state", "failed", timeout=30_000)
    expect(page.locator('th[data-run="ui-run-1"]')).to_have_attribute(
        "data-state", "failed", timeout=30_000
    )

    # Cancel a run that has ended: refused, said in one line, nothing changes.
    page.click("#run-cancel")
    page.click("#run-cancel")
    expect(page.locator("#ops-result")).to_contain_text("has already ended (failed)")

    # Mark the run success: every task instance with it, and the grid follows.
    page.click("#run-mark-success")
    page.click("#run-mark-success")
    expect(page.locator("#ops-result")).to_contain_text("Marked the run success")
    expect(hello).to_have_attribute("data-state", "success", timeout=30_000)
    expect(page.locator('th[data-run="ui-run-1"]')).to_have_attribute(
        "data-state", "success", timeout=30_000
    )


MAPPED_DAG = """
from sluice import DAG, task

with DAG("web_mapped", schedule=None) as dag:
    @task
    def names():
        return ["a", "b", "c"]

    @task
    def load(name):
        print("loading", name)
        return name

    @task
    def joined(values):
        return "".join(values)

    joined(load.expand(name=names()))
"""


def test_a_mapped_task_is_one_cell_that_opens_its_indexes(
    browser: Any, sluice: Sluice, tmp_path: Path
) -> None:
    """One cell for the mapped task with its count and states; the panel lists its indexes,
    each with its own log, and clears one index alone."""
    from playwright.sync_api import expect

    (sluice.dags_folder / "web_mapped_dag.py").write_text(MAPPED_DAG)
    sluice.run("dags", "list")
    sluice.scheduler()
    sluice.worker(concurrency=2)
    run_id = sluice.trigger("web_mapped", "--run-id", "mapped-1")
    assert sluice.wait_run("web_mapped", run_id) == "success"
    settings = Settings(
        database_url=sluice.database_url, broker_url=sluice.broker_url, namespace=sluice.namespace
    )
    with ServedApi(settings, ApiConfig(token=TOKEN)) as api:
        page, errors = new_page(browser)
        try:
            page.goto(api.url + "/")
            page.fill("#token", TOKEN)
            page.click("#token-form button")
            page.goto(api.url + "/dags/web_mapped")
            load = page.locator('button.cell[data-task="load"][data-run="mapped-1"]')
            expect(load).to_have_attribute("data-mapped", "3")
            expect(load).to_contain_text("×3")
            expect(load).to_have_attribute("title", re.compile("3 mapped indexes: 3 success"))
            load.click()
            expect(page.locator("#panel-indexes button")).to_have_count(3)
            expect(page.locator("#panel-title")).to_have_text("load [0] · mapped-1")
            expect(page.locator("#log")).to_contain_text("loading a")
            page.locator('#panel-indexes button[data-index="2"]').click()
            expect(page.locator("#panel-title")).to_have_text("load [2] · mapped-1")
            expect(page.locator("#log")).to_contain_text("loading c")
            page.click("#clear")
            expect(page.locator("#clear")).to_contain_text("Click again to clear load [2]")
            page.click("#clear")
            expect(page.locator("#clear-result")).to_contain_text("Cleared 1 task instance(s)")
            expect(page.locator("#tries")).to_contain_text("Try 2 (success)", timeout=60_000)
        except Exception as exc:
            page.screenshot(path=str(tmp_path / "failure.png"), full_page=True)
            raise AssertionError(
                f"UI test failed ({exc}); see {tmp_path}/failure.png\n{sluice.logs()}"
            ) from exc
        assert errors == []
    tries = rows(
        sluice.database_url,
        "SELECT map_index, try_number FROM task_instance WHERE task_id = 'load' ORDER BY 1",
    )
    assert tries == [(0, 1), (1, 1), (2, 2)]
    # each index printed: its result and log went in one transaction (index_written)
    assert sluice.logs().count("-> success (index_written") == 4


BIG_DAG = """
from sluice import DAG, Task


def noop():
    return None


with DAG("web_big", schedule=None) as dag:
    start = Task("start", python_callable=noop)
    start >> [Task(f"t{i:03d}", python_callable=noop) for i in range(449)]
"""


def _big_dag_runs(database_url: str, folder: Path) -> None:
    """`web_big` (450 tasks) parsed, with two runs as triggers make them: `big-1` with its
    start done and `t300` retrying, `big-2` queued (so the page refreshes every 1.5 s)."""
    import datetime as dt

    from sqlalchemy import update

    from sluice.scheduler.core.db import make_engine, make_session_factory, transaction, utcnow
    from sluice.scheduler.core.models import Dag, TaskInstance
    from sluice.scheduler.core.states import TI, RunType
    from sluice.scheduler.scheduling.dagbag import sync_dag_folder
    from sluice.scheduler.scheduling.dagrun import create_dagrun

    (folder / "web_big_dag.py").write_text(BIG_DAG)
    engine = make_engine(database_url)
    try:
        factory = make_session_factory(engine)
        sync_dag_folder(factory, folder, parse_timeout=60, now=utcnow())
        now = utcnow()
        for i, run_id in enumerate(("big-1", "big-2")):
            with transaction(factory) as session:
                dag = session.get(Dag, "web_big")
                assert dag is not None
                logical = now + dt.timedelta(days=i)
                run = create_dagrun(
                    session,
                    dag,
                    run_type=RunType.MANUAL,
                    logical_date=logical,
                    now=now,
                    run_id=run_id,
                )
                if run_id == "big-1":
                    for task_id, state, tries in (
                        ("start", TI.SUCCESS, 1),
                        ("t300", TI.UP_FOR_RETRY, 2),
                        ("t301", TI.UP_FOR_RESCHEDULE, 1),  # its usual try: not listed
                        ("t302", TI.REMOVED, 2),  # a state past the tenth: a letter code
                    ):
                        session.execute(
                            update(TaskInstance)
                            .where(
                                TaskInstance.dag_run_id == run.id, TaskInstance.task_id == task_id
                            )
                            .values(state=state, try_number=tries)
                        )
    finally:
        engine.dispose()


def test_a_big_dag_shows_its_rows_in_steps(browser: Any, pg_url: str, tmp_path: Path) -> None:
    """A 450-task DAG: 200 rows at first, 'Show 200 more' twice for all of them; a cell far
    down opens its panel and stays selected across the refreshes. Reads only: no broker."""
    from playwright.sync_api import expect

    folder = tmp_path / "dags"
    folder.mkdir()
    _big_dag_runs(pg_url, folder)
    settings = Settings(database_url=pg_url, dags_folder=folder, namespace="tbig")
    with ServedApi(settings, ApiConfig(token=TOKEN)) as api:
        page, errors = new_page(browser)
        try:
            page.goto(api.url + "/dags/web_big")
            rows_shown = page.locator("#grid tbody tr")
            expect(rows_shown).to_have_count(200)
            expect(page.locator("#grid-more-text")).to_have_text("Showing 200 of 450 tasks.")
            start = page.locator('button.cell[data-task="start"][data-run="big-1"]')
            expect(start).to_have_attribute("data-state", "success")
            expect(
                page.locator('button.cell[data-task="t000"][data-run="big-2"]')
            ).to_have_attribute("data-state", "none")
            page.get_by_role("button", name="Show 200 more").click()
            expect(rows_shown).to_have_count(400)
            retrying = page.locator('button.cell[data-task="t300"][data-run="big-1"]')
            expect(retrying).to_have_attribute("data-state", "up_for_retry")
            expect(retrying).to_have_attribute("title", re.compile(r"try 2$"))
            poking = page.locator('button.cell[data-task="t301"][data-run="big-1"]')
            expect(poking).to_have_attribute("data-state", "up_for_reschedule")
            expect(poking).to_have_text("resched")
            expect(poking).to_have_attribute("title", re.compile(r": up for reschedule$"))
            gone = page.locator('button.cell[data-task="t302"][data-run="big-1"]')
            expect(gone).to_have_attribute("data-state", "removed")
            expect(gone).to_have_attribute("title", re.compile(r": removed, try 2$"))
            page.get_by_role("button", name="Show 50 more").click()
            expect(rows_shown).to_have_count(450)
            expect(page.locator("#grid-more")).to_be_hidden()
            retrying.click()
            expect(page.locator("#panel-title")).to_have_text("t300 · big-1")
            expect(page.locator("#panel-state")).to_contain_text("try 2")
            # a refresh (every 1.5 s: big-2 is queued) keeps the rows and the selection
            page.wait_for_timeout(3_500)
            expect(rows_shown).to_have_count(450)
            expect(retrying).to_have_class(re.compile(r"\bselected\b"))
            expect(retrying).to_have_attribute("aria-pressed", "true")
        except Exception as exc:
            page.screenshot(path=str(tmp_path / "failure.png"), full_page=True)
            raise AssertionError(f"UI test failed ({exc}); see {tmp_path}/failure.png") from exc
        assert errors == []


DAILY_DAG = """
from datetime import datetime, timezone
from sluice import DAG, task

with DAG("web_daily", schedule="@daily", catchup=False,
         start_date=datetime(2026, 1, 1, tzinfo=timezone.utc)) as dag:
    @task
    def nothing():
        return None
"""


def _shown(iso: str) -> str:
    """A time as the UI writes it (`fmtTime`: UTC, seconds, `Z`)."""
    moment = dt.datetime.fromisoformat(iso).astimezone(dt.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%SZ")


def test_next_run_says_when_it_is_created_with_its_logical_date(
    browser: Any, sluice: Sluice
) -> None:
    from playwright.sync_api import expect

    (sluice.dags_folder / "web_daily_dag.py").write_text(DAILY_DAG)
    sluice.run("dags", "list")
    settings = Settings(
        database_url=sluice.database_url, broker_url=sluice.broker_url, namespace=sluice.namespace
    )
    with ServedApi(settings, ApiConfig(token=TOKEN)) as api:
        with urllib.request.urlopen(api.url + "/api/v1/dags/web_daily", timeout=10) as response:
            dag = json.loads(response.read())
        created, logical = dag["next_dagrun_create_after"], dag["next_dagrun"]
        # a daily run is created when its day is over: a day after its logical date
        assert dt.datetime.fromisoformat(created) - dt.datetime.fromisoformat(
            logical
        ) == dt.timedelta(days=1)
        expected = f"{_shown(created)} (logical date {_shown(logical)})"
        page, errors = new_page(browser)
        page.goto(api.url + "/")
        expect(page.locator('tr[data-dag="web_daily"] td.next-run')).to_have_text(expected)
        page.locator('tr[data-dag="web_daily"] a.dag-link').click()
        expect(page.locator("#dag-meta")).to_contain_text("next run: " + expected)
        assert errors == []
