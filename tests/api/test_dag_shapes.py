"""The DAG pages' task order and its cache: the same order as the old quadratic Kahn's
algorithm (kept here as the reference) in O(V + E log V), once per DAG version.

Timings are not asserted here: `python -m bench --only W9` measures the pages of a
10,000-task DAG.
"""

from __future__ import annotations

import contextlib
import json
import random
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import TypeAdapter
from sqlalchemy import event, text

from sluice.scheduler.api.schemas import DagDetail, TaskSpecOut
from sluice.scheduler.api.views import ShapeCache
from sluice.scheduler.core.db import make_engine
from sluice.scheduler.core.models import Dag
from sluice.scheduler.scheduling.shapes import task_order, task_specs, task_specs_json
from tests.api.conftest import AUTH

V1 = "/api/v1"


def old_task_order(spec: dict[str, Any]) -> list[str]:
    """The order as `shapes.task_order` computed it before: O(n² log n)."""
    tasks: dict[str, Any] = spec.get("tasks", {})
    pending = {t: {u for u in tasks[t].get("upstream", []) if u in tasks} for t in tasks}
    order: list[str] = []
    ready = sorted(t for t, ups in pending.items() if not ups)
    while ready:
        task_id = ready.pop(0)
        order.append(task_id)
        del pending[task_id]
        freed = [t for t, ups in pending.items() if task_id in ups]
        for t in freed:
            pending[t].discard(task_id)
        ready = sorted({*ready, *(t for t in freed if not pending[t])})
    return order + sorted(pending)


def spec_of(edges: dict[str, list[str]]) -> dict[str, Any]:
    """A serialized DAG whose task `t` has `edges[t]` upstream (and the matching downstream)."""
    downstream: dict[str, list[str]] = {t: [] for t in edges}
    for task_id, ups in edges.items():
        for up in ups:
            downstream.setdefault(up, []).append(task_id)
    return {
        "tasks": {
            t: {"upstream": ups, "downstream": downstream.get(t, []), "kind": "python"}
            for t, ups in edges.items()
        }
    }


def random_dag(rng: random.Random, n: int) -> dict[str, list[str]]:
    names = [f"t{rng.randrange(10**6):06d}" for _ in range(n)]
    names = list(dict.fromkeys(names))
    rng.shuffle(names)  # an edge goes from an earlier to a later name: acyclic
    return {name: rng.sample(names[:i], k=min(i, rng.randrange(4))) for i, name in enumerate(names)}


SHAPES: dict[str, dict[str, list[str]]] = {
    "empty": {},
    "one": {"a": []},
    "chain, ids against the order": {"c": [], "b": ["c"], "a": ["b"]},
    "diamond": {"a": [], "c": ["a"], "b": ["a"], "d": ["b", "c"]},
    "the demo DAG": {
        "extract": [],
        "transform": ["extract"],
        "load": ["transform"],
        "audit": ["extract"],
    },
    "fan-out and fan-in": {"start": [], **{f"m{i}": ["start"] for i in range(9)}, "end": []},
    "two roots, ties by id": {"z": [], "y": [], "b": ["z"], "a": ["y", "z"]},
    "cycle, left over last": {"root": [], "x": ["root", "y"], "y": ["x"], "w": ["y"]},
    "self loop": {"a": ["a"], "b": []},
    "upstream not in the DAG": {"a": ["ghost"], "b": ["a"]},
    "the same upstream twice": {"a": [], "b": ["a", "a"], "c": ["b"]},
}


@pytest.mark.parametrize("name", list(SHAPES))
def test_order_is_the_old_order(name: str) -> None:
    spec = spec_of(SHAPES[name])
    assert task_order(spec) == old_task_order(spec)


def test_order_of_random_dags_is_the_old_order() -> None:
    rng = random.Random(20260131)
    for _ in range(200):
        spec = spec_of(random_dag(rng, rng.randrange(1, 60)))
        assert task_order(spec) == old_task_order(spec)


def _upstream_first(order: list[str], spec: dict[str, Any]) -> bool:
    at = {t: i for i, t in enumerate(order)}
    return all(
        at[up] < at[t] for t, task in spec["tasks"].items() for up in task.get("upstream", [])
    )


def test_10000_task_chain_and_fan_out_are_ordered() -> None:
    chain = spec_of({f"c{i:05d}": [f"c{i - 1:05d}"] if i else [] for i in range(10_000)})
    middle = [f"t{i:05d}" for i in range(9_998)]
    fan = spec_of({"start": [], **dict.fromkeys(middle, ["start"]), "join": middle})

    assert task_order(chain) == [f"c{i:05d}" for i in range(10_000)]
    assert task_order(fan) == ["start", *middle, "join"]
    for spec in (chain, fan):
        assert _upstream_first(task_order(spec), spec)


def _dag(dag_id: str, version: str, spec: dict[str, Any]) -> Dag:
    return Dag(dag_id=dag_id, version_hash=version, serialized=spec)


def test_the_cache_keeps_one_shape_per_dag_version() -> None:
    cache = ShapeCache(max_bytes=10**6)
    v1 = spec_of({"a": [], "b": ["a"]})
    v2 = spec_of({"b": [], "a": ["b"]})

    first = cache.shape(_dag("d", "h1", v1))
    again = cache.shape(_dag("d", "h1", {"tasks": {}}))  # same version: not read again
    changed = cache.shape(_dag("d", "h2", v2))

    assert again is first and first.order == ("a", "b") and first.task_count == 2
    assert changed.order == ("b", "a")
    assert cache.shape(_dag("other", "h1", v2)).order == ("b", "a")  # keyed by DAG id too
    assert len(cache) == 3


def test_the_cache_is_bounded_and_drops_the_least_recently_used() -> None:
    spec = spec_of({f"t{i}": [] for i in range(10)})
    one = cache_size = ShapeCache(max_bytes=10**9).shape(_dag("x", "h", spec)).size
    cache = ShapeCache(max_bytes=3 * one)
    for n in range(3):
        cache.shape(_dag(f"d{n}", "h", spec))
    cache.shape(_dag("d0", "h", spec))  # d0 used again: d1 is now the oldest
    cache.shape(_dag("d3", "h", spec))

    assert len(cache) == 3 and cache.bytes <= 3 * cache_size
    assert cache.cached(_dag("d1", "h", spec)) is None
    assert cache.cached(_dag("d0", "h", spec)) is not None
    lone = ShapeCache(max_bytes=1)  # over the bound on its own: the newest is still kept
    assert lone.shape(_dag("big", "h", spec)).order and len(lone) == 1


def test_task_list_json_is_the_schema_s() -> None:
    spec = spec_of(SHAPES["the demo DAG"])
    spec["tasks"]["transform"].update(retries=2, queue="heavy", trigger_rule="all_success")
    order = task_order(spec)
    models = [
        TaskSpecOut(
            task_id=t,
            kind=spec["tasks"][t].get("kind"),
            upstream=sorted(spec["tasks"][t]["upstream"]),
            downstream=sorted(spec["tasks"][t]["downstream"]),
            trigger_rule=spec["tasks"][t].get("trigger_rule"),
            retries=int(spec["tasks"][t].get("retries") or 0),
            queue=spec["tasks"][t].get("queue") or "default",
        )
        for t in order
    ]
    adapter = TypeAdapter(list[TaskSpecOut])

    assert adapter.validate_json(task_specs_json(spec, order)) == models
    assert task_specs(spec, order) == [m.model_dump() for m in models]


@contextlib.contextmanager
def sent_statements(client: TestClient) -> Iterator[list[str]]:
    """The SQL the API app sends to its database while the block runs."""
    statements: list[str] = []
    engine = client.app.state.sluice.engine  # type: ignore[attr-defined]

    def seen(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        statements.append(statement)

    event.listen(engine, "before_cursor_execute", seen)
    try:
        yield statements
    finally:
        event.remove(engine, "before_cursor_execute", seen)


def _detail_and_grid(client: TestClient) -> tuple[list[str], list[str], Any, Any]:
    """A DAG page's reads, twice: the statements of the first, then of the second, and
    the detail and grid answers."""
    with sent_statements(client) as statements:
        first = client.get(f"{V1}/dags/demo")
        read_first = list(statements)
        statements.clear()
        second = client.get(f"{V1}/dags/demo")
        grid = client.get(f"{V1}/dags/demo/grid")
        read_again = list(statements)
    assert first.status_code == second.status_code == grid.status_code == 200
    assert first.json() == second.json()
    return read_first, read_again, first, grid


def _demo_is_the_page(first: Any, grid: Any) -> None:
    detail = DagDetail.model_validate_json(first.content)
    assert [t.task_id for t in detail.tasks] == ["extract", "audit", "transform", "load"]
    assert detail.task_count == 4 and json.loads(first.content)["tasks"][0]["queue"] == "default"
    assert grid.json()["task_ids"] == ["extract", "audit", "transform", "load"]


def test_dag_pages_read_the_shape_the_sync_stored(client: TestClient, settings: Any) -> None:
    # Given the demo DAG as the DAGs folder's sync records it: with its task order and
    # its detail's task list
    engine = make_engine(settings.database_url)
    try:
        with engine.connect() as conn:
            order, detail = conn.execute(
                text("SELECT task_order, tasks_detail FROM dag WHERE dag_id = 'demo'")
            ).one()
    finally:
        engine.dispose()
    assert json.loads(order) == ["extract", "audit", "transform", "load"]

    # When a new API process serves its detail and grid, twice
    read_first, read_again, first, grid = _detail_and_grid(client)

    # Then the first reads the stored shape and never the definition but its params, by
    # their path, the second neither
    assert any("dag.task_order" in s for s in read_first), read_first
    assert any("dag.tasks_detail" in s for s in read_first), read_first
    definition = [s for s in read_first + read_again if "serialized" in s]
    assert len(definition) == 1 and "dag.serialized ->" in definition[0], definition
    assert definition[0] in read_first
    assert not [s for s in read_again if "task_order" in s or "tasks_detail" in s]
    assert json.loads(first.content)["tasks"] == json.loads(detail)
    _demo_is_the_page(first, grid)

    # and its DAG list counts the other DAGs' tasks from their stored orders too
    with sent_statements(client) as statements:
        listing = client.get(f"{V1}/dags")
    assert listing.status_code == 200
    assert not [s for s in statements if "serialized" in s], statements
    assert any("dag.task_order" in s for s in statements), statements
    counts = {d["dag_id"]: d["task_count"] for d in listing.json()["dags"]}
    assert counts["demo"] == 4 and all(n > 0 for n in counts.values()), counts


def test_a_dag_recorded_without_its_shape_reads_its_definition_once_per_version(
    client: TestClient, settings: Any
) -> None:
    # Given the demo DAG recorded before its shape was stored (migration 0014)
    engine = make_engine(settings.database_url)
    try:
        with engine.begin() as conn:
            conn.execute(text("UPDATE dag SET task_order = NULL, tasks_detail = NULL"))
    finally:
        engine.dispose()

    # When a new API process serves its pages, and its DAG list
    read_first, read_again, first, grid = _detail_and_grid(client)
    with sent_statements(client) as statements:
        client.get(f"{V1}/dags")  # reads manual_only's definition, not demo's
        statements.clear()
        listing = client.get(f"{V1}/dags")

    # Then the first page read the definition, and nothing reads it again
    assert listing.status_code == 200
    assert any("dag.serialized" in s for s in read_first)
    assert not [s for s in read_again + statements if "serialized" in s]
    _demo_is_the_page(first, grid)
    assert {d["dag_id"]: d["task_count"] for d in listing.json()["dags"]}["demo"] == 4


def test_a_trigger_reads_the_dag_with_its_definition_in_one_statement(client: TestClient) -> None:
    """`POST …/runs` makes the run's TIs from the DAG's definition: it is read with the
    DAG's row, not by a second round trip (as a deferred column would be)."""
    with sent_statements(client) as statements:
        made = client.post(f"{V1}/dags/demo/runs", json={"run_id": "one_read"}, headers=AUTH)

    assert made.status_code == 201, made.text
    reads = [s for s in statements if s.lstrip().upper().startswith("SELECT") and "FROM dag " in s]
    assert len(reads) == 1 and "dag.serialized" in reads[0], reads
    assert client.get(f"{V1}/dags/demo/runs/one_read/tasks").json()["total"] == 4
