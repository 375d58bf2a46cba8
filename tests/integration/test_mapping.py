"""Dynamic task mapping on a real scheduler and worker: `partial(...).expand(...)` over
an upstream's output, the reduce, index-by-index chains, zero items, bad inputs,
`max_map_length`, retries of one index, `max_active_tis_per_dagrun`."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

from tests.integration.test_cancel_run import logs, rows
from tests.procs import Sluice, standalone

ISSUE_DAG = (Path(__file__).resolve().parents[2] / "examples" / "dags" / "files.py").read_text()
"""The issue's example, as the README shows it: `examples/dags/files.py`."""


def tis(sluice: Sluice, run_id: str) -> list[dict[str, Any]]:
    """The run's TIs (task_id, map_index, state, try_number, result, error, start/end)."""
    found = rows(
        sluice.database_url,
        "SELECT task_id, map_index, state, try_number, result, error, start_date, end_date "
        f"FROM task_instance WHERE run_id = '{run_id}' ORDER BY task_id, map_index",
    )
    keys = ("task_id", "map_index", "state", "try_number", "result", "error", "start", "end")
    return [dict(zip(keys, row, strict=True)) for row in found]


def of(found: list[dict[str, Any]], task_id: str) -> list[dict[str, Any]]:
    return [ti for ti in found if ti["task_id"] == task_id]


def test_the_issue_example_maps_and_reduces(sluice: Sluice) -> None:
    (sluice.dags_folder / "files.py").write_text(textwrap.dedent(ISSUE_DAG))
    sluice.run("dags", "list")
    sluice.scheduler()
    sluice.worker()
    run_id = sluice.trigger("files")
    assert sluice.wait_run("files", run_id) == "success"
    found = tis(sluice, run_id)
    loads = of(found, "load")
    assert [ti["map_index"] for ti in loads] == [0, 1, 2]
    assert [ti["state"] for ti in loads] == ["success"] * 3
    assert [json.loads(ti["result"]) for ti in loads] == [5, 5, 5]
    (total,) = of(found, "total")
    assert (total["map_index"], total["state"], json.loads(total["result"])) == (-1, "success", 15)
    # each index's result written by the worker, which leaves only the last to a scheduler
    assert logs(sluice).count("-> success (index_at_once, then ") == 3
    listed = json.loads(sluice.ok("tasks", "states", "files", run_id, "--json"))
    assert sorted((r["task_id"], r["map_index"]) for r in listed) == [
        ("list_files", None),
        ("load", 0),
        ("load", 1),
        ("load", 2),
        ("total", None),
    ]


CHAIN_DAG = """
import time
from sluice import DAG, task

with DAG("chain", schedule=None, max_active_tasks=8) as dag:
    @task
    def make():
        return [0, 1, 2]

    @task
    def first(x, context):
        time.sleep(6 if x == 2 else 0)  # index 2 of `first` is slow
        return x * 10

    @task
    def second(y):
        return y + 1

    @task
    def gather(values):
        return values

    gather(second.expand(y=first.expand(x=make())))
"""


def test_a_mapped_chain_runs_index_by_index(sluice: Sluice) -> None:
    """Index 0 of `second` starts (and ends) before index 2 of `first` finishes."""
    (sluice.dags_folder / "chain.py").write_text(textwrap.dedent(CHAIN_DAG))
    sluice.run("dags", "list")
    sluice.scheduler()
    sluice.worker(concurrency=4)
    run_id = sluice.trigger("chain")
    assert sluice.wait_run("chain", run_id) == "success"
    found = tis(sluice, run_id)
    first, second = of(found, "first"), of(found, "second")
    assert [ti["map_index"] for ti in second] == [0, 1, 2]
    assert [json.loads(ti["result"]) for ti in second] == [1, 11, 21]
    assert second[0]["start"] < first[2]["end"]
    assert second[0]["end"] < first[2]["end"]
    (gather,) = of(found, "gather")
    assert json.loads(gather["result"]) == [1, 11, 21]


EDGE_DAG = """
from sluice import DAG, TriggerRule, task

with DAG("edges", schedule=None) as dag:
    @task
    def nothing():
        return []

    @task
    def each(x):
        return x

    @task
    def after(values):
        return "ran"

    @task(trigger_rule=TriggerRule.ALL_DONE)
    def always(values):
        return values

    empty = each.expand(x=nothing())
    after(empty)
    always(empty)

    @task
    def scalar():
        return "not a list"

    @task
    def bad(x):
        return x

    bad.expand(x=scalar())

    @task
    def many():
        return list(range(6))

    @task(max_map_length=5)
    def capped(x):
        return x

    capped.expand(x=many())

    @task
    def pairs():
        return {"a": 1, "b": 2}

    @task
    def both(pair, n):
        return [pair[0], pair[1], n]

    both.expand(pair=pairs(), n=[10, 20])

    @task
    def kwargs_list():
        return [{"x": 1, "y": 2}, {"x": 3, "y": 4}]

    @task
    def add(x, y, z):
        return x + y + z

    add.partial(z=100).expand_kwargs(kwargs_list())
"""


def test_zero_items_bad_inputs_dicts_products_and_kwargs(sluice: Sluice) -> None:
    (sluice.dags_folder / "edges.py").write_text(textwrap.dedent(EDGE_DAG))
    sluice.run("dags", "list")
    sluice.scheduler()
    sluice.worker()
    run_id = sluice.trigger("edges")
    assert sluice.wait_run("edges", run_id) == "failed"
    found = tis(sluice, run_id)
    # zero items: the mapped task is skipped, its downstream by its trigger rule
    assert [(t["map_index"], t["state"]) for t in of(found, "each")] == [(-1, "skipped")]
    assert of(found, "after")[0]["state"] == "skipped"
    always = of(found, "always")[0]
    assert (always["state"], json.loads(always["result"])) == ("success", [])
    # a non-list fails the upstream's try, with the reason; nothing was created
    scalar = of(found, "scalar")[0]
    assert scalar["state"] == "failed"
    assert "is a str: a mapped task expands over a list or a dict" in scalar["error"]
    assert [(t["map_index"], t["state"]) for t in of(found, "bad")] == [(-1, "upstream_failed")]
    # more items than max_map_length fails the upstream's try
    many = of(found, "many")[0]
    assert many["state"] == "failed"
    assert "returned 6 items, more than max_map_length 5 of mapped task 'capped'" in many["error"]
    assert [(t["map_index"], t["state"]) for t in of(found, "capped")] == [(-1, "upstream_failed")]
    # a dict's items times a literal list: the cross product, the last argument fastest
    both = [json.loads(t["result"]) for t in of(found, "both")]
    assert both == [["a", 1, 10], ["a", 1, 20], ["b", 2, 10], ["b", 2, 20]]
    # expand_kwargs with partial
    assert [json.loads(t["result"]) for t in of(found, "add")] == [103, 107]


RETRY_DAG = """
import os
from pathlib import Path
from sluice import DAG, task

MARKS = Path(os.environ["MAP_MARKS"])

with DAG("retry", schedule=None) as dag:
    @task(retries=1, retry_delay=0, max_active_tis_per_dagrun=2)
    def work(x):
        mark = MARKS / f"{x}.tries"
        tries = len(mark.read_text()) if mark.exists() else 0
        mark.write_text("x" * (tries + 1))
        if x == 3 and tries == 0:
            raise RuntimeError("index 3 fails once")
        return x

    @task
    def collect(values):
        return values

    collect(work.expand(x=[0, 1, 2, 3, 4, 5]))
"""


def test_one_index_retries_alone_and_the_run_limit_holds(sluice: Sluice, tmp_path: Any) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    sluice.extra_env["MAP_MARKS"] = str(marks)
    (sluice.dags_folder / "retry.py").write_text(textwrap.dedent(RETRY_DAG))
    sluice.run("dags", "list")
    sluice.scheduler()
    sluice.worker(concurrency=4)
    run_id = sluice.trigger("retry")
    assert sluice.wait_run("retry", run_id) == "success"
    found = of(tis(sluice, run_id), "work")
    assert [t["try_number"] for t in found] == [1, 1, 1, 2, 1, 1]
    assert {p.name: len(p.read_text()) for p in marks.iterdir()} == {
        f"{i}.tries": 2 if i == 3 else 1 for i in range(6)
    }
    (collect,) = of(tis(sluice, run_id), "collect")
    assert json.loads(collect["result"]) == [0, 1, 2, 3, 4, 5]
    # never more than 2 indexes running at once
    spans = [(t["start"], t["end"]) for t in found]
    for start, _ in spans:
        assert sum(s <= start < e for s, e in spans) <= 2


def test_mapping_on_the_embedded_sqlite_path(tmp_path: Any) -> None:
    """`sluice standalone` (SQLite, embedded broker) runs the issue's example, mapped."""
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "files.py").write_text(textwrap.dedent(ISSUE_DAG))
    done = standalone(
        tmp_path, dags, f"sqlite:///{tmp_path / 'map.db'}", "--trigger", "files", "--json"
    )
    assert done.returncode == 0, done.stderr
    listed = json.loads(done.stdout)["tasks"]
    assert [(r["task_id"], r["map_index"], r["state"]) for r in listed] == [
        ("list_files", None, "success"),
        ("load", 0, "success"),
        ("load", 1, "success"),
        ("load", 2, "success"),
        ("total", None, "success"),
    ]
