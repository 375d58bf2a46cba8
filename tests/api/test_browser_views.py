"""The DAG page's pictures in headless Chromium: the graph of a run, its Gantt chart, and
the run bars of the grid whose heights are the runs' durations.

Screenshots of the graph and the Gantt chart are written to `artifacts/browser/` at the
top of the repository (git ignores `artifacts/`; SLUICE_TEST_ARTIFACTS names another
directory), one file per test and view, whether the test passes or fails.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sluice.scheduler.api.config import ApiConfig
from sluice.scheduler.api.ui import STATIC_DIR
from sluice.scheduler.core.settings import Settings
from tests.api.conftest import TOKEN
from tests.api.test_browser import ServedApi, launched_browser, new_page
from tests.procs import Sluice

ARTIFACTS = Path(
    os.environ.get("SLUICE_TEST_ARTIFACTS") or Path(__file__).parents[2] / "artifacts" / "browser"
)

FANOUT_DAG = """
from sluice import DAG, task

with DAG("web_fanout", schedule=None) as dag:
    @task
    def start():
        return ["a", "b", "c"]

    @task
    def load(name):
        print("loading", name)
        return name

    @task(retries=1, retry_delay=0)
    def flaky(context):
        print("flaky, try", context["try_number"])
        raise RuntimeError("flaky fails every time")

    @task
    def side_1():
        return 1

    @task
    def side_2():
        return 2

    @task
    def report(names):
        return len(names)

    report(load.expand(name=start()))
    start >> [flaky, side_1, side_2]
    [flaky, side_1, side_2] >> report
"""

EDGES = {
    ("start", "load"),
    ("start", "flaky"),
    ("start", "side_1"),
    ("start", "side_2"),
    ("load", "report"),
    ("flaky", "report"),
    ("side_1", "report"),
    ("side_2", "report"),
}

# The colours of style.css, as Chromium computes them (`background: #1a7f37` ...).
COLOURS = {
    "success": "rgb(26, 127, 55)",
    "failed": "rgb(179, 38, 30)",
    "upstream_failed": "rgb(125, 46, 104)",
}


@pytest.fixture
def browser() -> Iterator[Any]:
    yield from launched_browser()


def shot(page: Any, name: str) -> Path:
    """A screenshot of the whole page into ARTIFACTS, as `name`.png."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def heights_of(page: Any, selector: str, key: str) -> dict[str, float]:
    """The heights of the elements matching `selector` by their `th`'s `data-<key>`, read
    at one moment (the page redraws the grid at each refresh)."""
    return dict(
        page.evaluate(
            """([selector, key]) => [...document.querySelectorAll(selector)].map((el) =>
                 [el.closest("th").dataset[key], el.getBoundingClientRect().height])""",
            [selector, key],
        )
    )


def boxes_of(page: Any, *selectors: str) -> list[dict[str, float]]:
    """The box of the first element matching each selector, read at one moment."""
    return list(
        page.evaluate(
            """(selectors) => selectors.map((s) => {
                 const r = document.querySelector(s).getBoundingClientRect();
                 return { x: r.x, y: r.y, width: r.width, height: r.height }; })""",
            list(selectors),
        )
    )


def open_dag(page: Any, base: str, dag_id: str) -> None:
    page.goto(base + "/")
    page.fill("#token", TOKEN)
    page.click("#token-form button")
    page.goto(f"{base}/dags/{dag_id}")


def test_the_graph_and_the_gantt_chart_of_a_fan_out_run(browser: Any, sluice: Sluice) -> None:
    from playwright.sync_api import expect

    # Given a fan-out DAG run to its end by a real scheduler and worker: a mapped task of
    # three indexes, a task that fails both its tries, and a join that cannot run
    (sluice.dags_folder / "web_fanout_dag.py").write_text(FANOUT_DAG)
    sluice.run("dags", "list")
    sluice.scheduler()
    sluice.worker(concurrency=2)
    run_id = sluice.trigger("web_fanout", "--run-id", "fan-1")
    assert sluice.wait_run("web_fanout", run_id) == "failed", sluice.logs()
    settings = Settings(
        database_url=sluice.database_url, broker_url=sluice.broker_url, namespace=sluice.namespace
    )
    with ServedApi(settings, ApiConfig(token=TOKEN)) as api:
        page, errors = new_page(browser)
        try:
            # When the user opens the DAG: the graph of its newest run is shown
            open_dag(page, api.url, "web_fanout")
            nodes = page.locator("#graph button.gnode")
            expect(nodes).to_have_count(6)
            expect(page.locator("#run-view-run")).to_contain_text("fan-1")
            edges = page.locator("#graph svg path.edge")
            expect(edges).to_have_count(8)
            drawn = {
                (e.get_attribute("data-from"), e.get_attribute("data-to")) for e in edges.all()
            }
            assert drawn == EDGES
            expect(page.locator("#graph-note")).to_contain_text("6 tasks, 8 dependencies")

            # Then each box says and shows its state in the run, with the mapped count
            wanted = {
                "start": "success",
                "load": "success",
                "side_1": "success",
                "side_2": "success",
                "flaky": "failed",
                "report": "upstream_failed",
            }
            for task_id, state in wanted.items():
                box = page.locator(f'#graph button.gnode[data-task="{task_id}"]')
                expect(box).to_have_attribute("data-state", state)
                expect(box).to_have_css("background-color", COLOURS[state])
            load = page.locator('#graph button.gnode[data-task="load"]')
            expect(load).to_have_attribute("data-mapped", "3")
            expect(load).to_contain_text("success ×3")
            expect(load).to_have_attribute(
                "title", "load in run fan-1: 3 mapped indexes: 3 success"
            )
            flaky = page.locator('#graph button.gnode[data-task="flaky"]')
            expect(flaky).to_contain_text("failed, try 2")
            # every box is right of its upstream boxes (laid out left to right)
            placed = boxes_of(page, *(f'.gnode[data-task="{t}"]' for t in wanted))
            left = {t: box["x"] for t, box in zip(wanted, placed, strict=True)}
            for up, down in EDGES:
                assert left[up] < left[down], (up, down, left)
            shot(page, "fan-out-graph")

            # Clicking a box opens its task instance in the panel
            flaky.click()
            expect(page.locator("#panel-title")).to_have_text("flaky · fan-1")
            expect(page.locator("#tries")).to_contain_text("Try 2 (failed)")
            expect(flaky).to_have_class(re.compile(r"\bselected\b"))
            load.click()
            expect(page.locator("#panel-title")).to_have_text("load [0] · fan-1")
            expect(page.locator("#panel-indexes button")).to_have_count(3)

            # The Gantt chart lists every task instance of the run and each of its tries
            page.get_by_role("tab", name="Gantt").click()
            rows = page.locator("#gantt tbody tr")
            expect(rows).to_have_count(8)
            listed = [
                (r.get_attribute("data-task"), r.get_attribute("data-index")) for r in rows.all()
            ]
            assert listed == [
                ("start", ""),
                ("flaky", ""),
                ("load", "0"),
                ("load", "1"),
                ("load", "2"),
                ("side_1", ""),
                ("side_2", ""),
                ("report", ""),
            ]
            tries = {
                (task, index): page.locator(
                    f'#gantt tr[data-task="{task}"][data-index="{index}"] .gantt-try'
                )
                for task, index in listed
            }
            for key, bars in tries.items():
                expect(bars).to_have_count({"flaky": 2, "report": 0}.get(key[0], 1))
            first, second = tries[("flaky", "")].all()
            assert first.get_attribute("data-try") == "1"
            # the first try failed and was retried: kept with its outcome and its times
            assert first.get_attribute("data-state") == "up_for_retry"
            assert re.fullmatch(
                r"flaky, try 1 \(up for retry\): queued \d\d:\d\d:\d\d\.\d{3}, started \S+, "
                r"ended \S+, ran [\d.]+ s, waited [\d.]+ s, on \S+",
                first.get_attribute("title") or "",
            ), first.get_attribute("title")
            said = second.get_attribute("title") or ""
            assert re.fullmatch(
                r"flaky, try 2 \(failed\): queued \d\d:\d\d:\d\d\.\d{3}, started \S+, ended \S+, "
                r"ran [\d.]+ s, waited [\d.]+ s, on \S+",
                said,
            ), said
            # the second try starts after the first ended; each bar has a width
            a, b = boxes_of(
                page,
                '#gantt tr[data-task="flaky"] .gantt-try[data-try="1"]',
                '#gantt tr[data-task="flaky"] .gantt-try[data-try="2"]',
            )
            assert a["x"] + a["width"] <= b["x"] + 1 and a["width"] >= 2 and b["width"] >= 2
            expect(page.locator("#gantt-note")).to_contain_text(
                "Run fan-1: 8 task instances, 8 tries (8 with times)"
            )
            expect(page.locator('#gantt tr[data-task="report"] .chip')).to_have_attribute(
                "data-state", "upstream_failed"
            )
            shot(page, "fan-out-gantt")
            # a row opens its task instance (a mapped one's index)
            page.locator('#gantt tr[data-task="load"][data-index="2"] button.gantt-task').click()
            expect(page.locator("#panel-title")).to_have_text("load [2] · fan-1")
        except Exception as exc:
            path = shot(page, "fan-out-failure")
            raise AssertionError(f"UI test failed ({exc}); see {path}\n{sluice.logs()}") from exc
        assert errors == []


BARS_DAG = """
from sluice import DAG, task

with DAG("web_bars", schedule=None) as dag:
    @task
    def one():
        return 1

    @task
    def two():
        return 2

    one >> two
"""


def _bar_runs(database_url: str, folder: Path) -> None:
    """`web_bars` with four runs: `short` took 10 s, `long` 40 s, `waiting` has not
    started, `now` runs since 20 s ago; `long`'s TIs hold their stamps."""
    from sqlalchemy import update

    from sluice.scheduler.core.db import make_engine, make_session_factory, transaction, utcnow
    from sluice.scheduler.core.models import Dag, DagRun, TaskInstance
    from sluice.scheduler.core.states import TI, DagRunState, RunType
    from sluice.scheduler.scheduling.dagbag import sync_dag_folder
    from sluice.scheduler.scheduling.dagrun import create_dagrun

    (folder / "web_bars_dag.py").write_text(BARS_DAG)
    engine = make_engine(database_url)
    try:
        factory = make_session_factory(engine)
        sync_dag_folder(factory, folder, parse_timeout=60, now=utcnow())
        now = utcnow()
        t0 = now - dt.timedelta(hours=1)
        runs = [
            ("short", DagRunState.SUCCESS, t0, t0 + dt.timedelta(seconds=10)),
            ("long", DagRunState.FAILED, t0, t0 + dt.timedelta(seconds=40)),
            ("waiting", DagRunState.QUEUED, None, None),
            ("now", DagRunState.RUNNING, now - dt.timedelta(seconds=20), None),
        ]
        for i, (run_id, state, start, end) in enumerate(runs):
            with transaction(factory) as session:
                dag = session.get(Dag, "web_bars")
                assert dag is not None
                run = create_dagrun(
                    session,
                    dag,
                    run_type=RunType.MANUAL,
                    logical_date=t0 + dt.timedelta(days=i),
                    now=t0,
                    run_id=run_id,
                )
                session.execute(
                    update(DagRun)
                    .where(DagRun.id == run.id)
                    .values(state=state, queued_at=t0, start_date=start, end_date=end)
                )
                if run_id == "long":
                    for task_id, state_, q, s, e in (
                        ("one", TI.SUCCESS, 0, 1, 11),
                        ("two", TI.FAILED, 12, 15, 40),
                    ):
                        session.execute(
                            update(TaskInstance)
                            .where(
                                TaskInstance.dag_run_id == run.id, TaskInstance.task_id == task_id
                            )
                            .values(
                                state=state_,
                                try_number=1,
                                queued_at=t0 + dt.timedelta(seconds=q),
                                start_date=t0 + dt.timedelta(seconds=s),
                                end_date=t0 + dt.timedelta(seconds=e),
                            )
                        )
    finally:
        engine.dispose()


def test_a_runs_bar_is_as_tall_as_its_duration(browser: Any, pg_url: str, tmp_path: Path) -> None:
    """The longest run shown has the tallest bar (48 px), the others in proportion; a run
    that has not started has the lowest; a bar selects its run. Reads only: no broker."""
    from playwright.sync_api import expect

    folder = tmp_path / "dags"
    folder.mkdir()
    _bar_runs(pg_url, folder)
    settings = Settings(database_url=pg_url, dags_folder=folder, namespace="tbars")
    with ServedApi(settings, ApiConfig(token=TOKEN)) as api:
        page, errors = new_page(browser)
        try:
            open_dag(page, api.url, "web_bars")
            long_bar = page.locator('th[data-run="long"] .run-bar')
            expect(long_bar).to_have_attribute("data-seconds", "40.000")
            heights = heights_of(page, "th[data-run] .run-bar", "run")
            assert heights["long"] == 48
            assert heights["short"] == 12  # 10 s of 40 s
            assert 22 <= heights["now"] <= 30  # 20 s so far (and growing)
            assert heights["waiting"] == 2
            pick = page.locator('button.run-pick[data-run="long"]')
            expect(pick).to_have_attribute("title", re.compile(r"^long \(.*\): failed, 40\.0 s$"))
            # the newest run is shown at first; a bar shows its run instead
            expect(page.locator("#run-view-run")).to_contain_text("now")
            pick.click()
            expect(pick).to_have_attribute("aria-pressed", "true")
            expect(page.locator("#run-view-run")).to_have_text("long · failed · 40.0 s")
            two = page.locator('#graph button.gnode[data-task="two"]')
            expect(two).to_have_attribute("data-state", "failed")
            # the Gantt chart of `long`: a try from queued (12 s) to start (15 s) to end (40 s)
            page.get_by_role("tab", name="Gantt").click()
            tried = page.locator('#gantt tr[data-task="two"] .gantt-try')
            expect(tried).to_have_count(1)
            expect(tried).to_have_attribute(
                "title", re.compile(r"^two, try 1 \(failed\): .*ran 25\.0 s, waited 3\.00 s$")
            )
            track, box, queued = boxes_of(
                page,
                '#gantt tr[data-task="two"] .gantt-track',
                '#gantt tr[data-task="two"] .gantt-try',
                '#gantt tr[data-task="two"] .gantt-queued',
            )
            # the axis is the run's 40 s: the try spans 12 s to 40 s of it
            assert abs((box["x"] - track["x"]) / track["width"] - 12 / 40) < 0.02
            assert abs(box["width"] / track["width"] - 28 / 40) < 0.02
            assert abs(queued["width"] / box["width"] - 3 / 28) < 0.03
            shot(page, "run-bars-gantt")
        except Exception as exc:
            path = shot(page, "run-bars-failure")
            raise AssertionError(f"UI test failed ({exc}); see {path}") from exc
        assert errors == []


HUGE_DAG = """
from sluice import DAG, Task


def noop():
    return None


with DAG("web_huge", schedule=None) as dag:
    start = Task("start", python_callable=noop)
    start >> [Task(f"t{i:05d}", python_callable=noop) for i in range(9999)]
"""


def test_a_dag_of_10000_tasks_says_its_graph_is_too_big(
    browser: Any, pg_url: str, tmp_path: Path
) -> None:
    """No graph is laid out past the bound: the page says so at once, and the grid still
    reads and shows its first 200 rows."""
    from playwright.sync_api import expect

    from sluice.scheduler.core.db import make_engine, make_session_factory, utcnow
    from sluice.scheduler.scheduling.dagbag import sync_dag_folder

    folder = tmp_path / "dags"
    folder.mkdir()
    (folder / "web_huge_dag.py").write_text(HUGE_DAG)
    engine = make_engine(pg_url)
    try:
        sync_dag_folder(make_session_factory(engine), folder, parse_timeout=120, now=utcnow())
    finally:
        engine.dispose()
    settings = Settings(database_url=pg_url, dags_folder=folder, namespace="thuge")
    with ServedApi(settings, ApiConfig(token=TOKEN)) as api:
        page, errors = new_page(browser)
        try:
            open_dag(page, api.url, "web_huge")
            expect(page.locator("#graph-note")).to_have_text(
                "This DAG has 10000 tasks: the graph view draws DAGs of up to 1000 tasks. "
                "The grid above shows every task."
            )
            expect(page.locator("#graph .gnode")).to_have_count(0)
            expect(page.locator("#grid tbody tr")).to_have_count(200)
            expect(page.locator("#grid-more-text")).to_have_text("Showing 200 of 10000 tasks.")
            page.get_by_role("tab", name="Gantt").click()
            expect(page.locator("#gantt-note")).to_have_text("No run yet.")
        except Exception as exc:
            path = shot(page, "huge-failure")
            raise AssertionError(f"UI test failed ({exc}); see {path}") from exc
        assert errors == []


@pytest.mark.parametrize("tasks", [1, 30])
def test_the_layout_puts_each_task_right_of_its_upstream(browser: Any, tasks: int) -> None:
    """SluiceGraph.layout alone, in the browser, on a chain with a long edge and a
    diamond: every edge goes left to right, no two boxes overlap."""
    page, errors = new_page(browser)
    page.set_content("<!doctype html><html><body></body></html>")
    page.add_script_tag(content=(STATIC_DIR / "common.js").read_text())
    page.add_script_tag(content=(STATIC_DIR / "graph.js").read_text())
    ups: dict[str, list[str]] = {f"t{i}": [f"t{i - 1}"] if i else [] for i in range(tasks)}
    if tasks > 3:
        ups["t3"].append("t0")  # spans three layers
        ups["side"] = ["t0"]
        ups["t4"].append("side")
    specs = [{"task_id": task_id, "upstream": upstream} for task_id, upstream in ups.items()]
    placed = page.evaluate(
        """(specs) => { const l = SluiceGraph.layout(specs);
             return { nodes: Object.fromEntries(l.nodes), edges: l.edges }; }""",
        specs,
    )
    assert len(placed["nodes"]) == len(specs)
    assert len(placed["edges"]) == sum(len(s["upstream"]) for s in specs)
    for edge in placed["edges"]:
        xs = [p[0] for p in edge["points"]]
        assert xs == sorted(xs), edge
        assert placed["nodes"][edge["from"]]["x"] < placed["nodes"][edge["to"]]["x"]
    boxes = sorted((n["x"], n["y"]) for n in placed["nodes"].values())
    for (x1, y1), (x2, y2) in zip(boxes, boxes[1:], strict=False):
        assert x1 != x2 or y2 - y1 >= 40, (x1, y1, y2)
    assert errors == []
