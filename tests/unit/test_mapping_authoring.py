"""Mapping in a DAG file: `partial`/`expand`/`expand_kwargs`, what is serialized, the
one-line errors of bad calls, and what each index is called with."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sluice import DAG, DagDefinitionError, ShellTask, Upstream, task
from sluice.tasks.loader import load_file
from sluice.tasks.mapping import MapInputError, MapSpec, check_map_output, index_kwargs
from sluice.tasks.runtime import run_task
from sluice.tasks.serialize import serialize_dag, version_hash

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "dags" / "files.py"


def test_the_issue_dag_file_loads_and_serializes() -> None:
    (dag,) = load_file(EXAMPLE)
    load, total = dag.tasks["load"], dag.tasks["total"]
    assert load.upstream_task_ids == {"list_files"} and total.upstream_task_ids == {"load"}
    assert load.map == MapSpec("product", (("path", Upstream("list_files")),))
    assert load.bound_call == ((), {"table": "raw"})
    spec = serialize_dag(dag)["tasks"]
    assert spec["load"]["map"] == {
        "mode": "product",
        "args": [["path", {"$upstream": "list_files"}]],
        "per_index": None,
    }
    assert spec["list_files"]["map_output"] == {
        "limit": 10_000,
        "consumer": "load",
        "kwargs": False,
    }
    assert "map" not in spec["total"] and "map_output" not in spec["total"]


def test_a_task_expanded_over_a_mapped_output_alone_maps_one_to_one() -> None:
    with DAG("chain", schedule=None) as dag:

        @task
        def a(x: int) -> int:
            return x

        @task
        def b(y: int, z: int) -> int:
            return y + z

        @task
        def c(y: int) -> int:
            return y

        out = a.expand(x=[1, 2, 3])
        b.expand(y=out, z=[10, 20])  # with another argument: the whole list, a product
        c.expand(y=out)
    tasks = serialize_dag(dag)["tasks"]
    assert tasks["c"]["map"]["per_index"] == "a"
    assert tasks["b"]["map"]["per_index"] is None
    assert dag.tasks["c"].per_index == "a" and dag.tasks["b"].per_index is None


def test_a_tasks_result_links_as_its_task() -> None:
    # As Airflow's XComArg: `start >> load.expand(...)`, `total(...) >> report`
    with DAG("links", schedule=None) as dag:

        @task
        def start() -> None:
            return None

        @task
        def load(path: str) -> int:
            return len(path)

        @task
        def total(counts: list[int]) -> int:
            return sum(counts)

        @task
        def report() -> None:
            return None

        @task
        def audit() -> None:
            return None

        counts = load.expand(path=["a", "b"])
        start >> counts
        total(counts) >> report
        [audit] << counts  # the list runs after the result's task
        assert counts.__rshift__(report) is report
    upstream = {t: sorted(dag.tasks[t].upstream_task_ids) for t in dag.tasks}
    assert upstream == {
        "start": [],
        "load": ["start"],
        "total": ["load"],
        "report": ["load", "total"],
        "audit": ["load"],
    }
    assert sorted(dag.tasks["load"].downstream_task_ids) == ["audit", "report", "total"]


def test_a_result_outside_its_dag_links_nothing() -> None:
    with DAG("apart", schedule=None):

        @task
        def only() -> None:
            return None

    gone = r"Upstream\('gone'\) links no task"
    with pytest.raises(DagDefinitionError, match=gone), DAG("other", schedule=None):
        only >> Upstream("gone")


def test_an_unmapped_dag_keeps_its_version_hash() -> None:
    def build() -> DAG:
        with DAG("plain", schedule=None) as dag:

            @task
            def one() -> int:
                return 1

            one >> task(task_id="two")(lambda: 2)
        return dag

    spec = serialize_dag(build())
    assert not any(k in t for t in spec["tasks"].values() for k in ("map", "map_output"))
    assert "max_map_length" not in spec["tasks"]["one"]
    assert version_hash(spec) == version_hash(serialize_dag(build()))


def _mapped_dag(body: Any) -> None:
    with DAG("bad", schedule=None):

        @task
        def up() -> list[int]:
            return [1]

        @task
        def each(x: int, y: int = 0) -> int:
            return x

        body(up, each)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (lambda up, each: each.expand(x=3), "expand(x=...) takes a list, a dict or another"),
        (lambda up, each: each.expand(nope=[1]), "called with bad arguments"),
        (lambda up, each: each.partial(x=1).expand(x=[1]), "x given to both partial() and"),
        (lambda up, each: (each.expand(x=[1]), each.expand(x=[2])), "is mapped twice"),
        (lambda up, each: (each(1), each.expand(x=[2])), "is mapped twice"),
        (lambda up, each: (each.expand(x=[1]), each(2)), "is called twice"),
        (lambda up, each: each.expand(), "expand() needs an argument to map"),
        (lambda up, each: each.expand_kwargs([1, 2]), "expand_kwargs() takes a list of dicts"),
        (lambda up, each: each.expand_kwargs([{"nope": 1}]), "called with bad arguments"),
        (lambda up, each: each.expand(x=up(), context=[1]), "`context` is passed by the worker"),
    ],
    ids=[
        "not-a-list",
        "unknown-argument",
        "partial-and-expand",
        "expand-twice",
        "call-then-expand",
        "expand-then-call",
        "nothing-to-map",
        "kwargs-not-dicts",
        "kwargs-unknown-argument",
        "context",
    ],
)
def test_bad_mapping_calls_are_one_line_errors(body: Any, message: str) -> None:
    with pytest.raises(DagDefinitionError) as caught:
        _mapped_dag(body)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_what_cannot_be_mapped() -> None:
    with DAG("limits", schedule=None), pytest.raises(DagDefinitionError, match="branch task"):

        @task.branch
        def pick(x: int) -> str:
            return "a"

        pick.expand(x=[1])
    with DAG("shell", schedule=None), pytest.raises(DagDefinitionError, match="shell task"):
        ShellTask("sh", command="echo hi").expand(x=[1])
    with DAG("long", schedule=None), pytest.raises(DagDefinitionError, match="max_map_length 2"):

        @task(max_map_length=2)
        def capped(x: int) -> int:
            return x

        capped.expand(x=[1, 2, 3])
    with DAG("opts", schedule=None), pytest.raises(DagDefinitionError, match="must be >= 1"):
        task(task_id="zero", max_active_tis_per_dagrun=0)(lambda: None)


def test_each_index_is_called_with_its_items() -> None:
    product = MapSpec("product", (("a", [1, 2]), ("b", Upstream("up")), ("c", {"k": "v"})))
    calls = [index_kwargs(product, {"up": ["x", "y", "z"]}, i) for i in range(6)]
    assert calls[0] == {"a": 1, "b": "x", "c": ("k", "v")}
    assert [(c["a"], c["b"]) for c in calls] == [
        (1, "x"),
        (1, "y"),
        (1, "z"),
        (2, "x"),
        (2, "y"),
        (2, "z"),
    ]
    kwargs = MapSpec("kwargs", (("*", Upstream("up")),))
    assert index_kwargs(kwargs, {"up": [{"p": 1}, {"p": 2}]}, 1) == {"p": 2}
    one_to_one = MapSpec("product", (("y", Upstream("a")),))
    assert index_kwargs(one_to_one, {"a": 7}, 4, per_index="a") == {"y": 7}


def test_a_mapped_task_runs_as_its_index() -> None:
    with DAG("run", schedule=None) as dag:

        @task
        def names() -> list[str]:
            return ["a", "b"]

        @task
        def greet(name: str, punct: str, context: dict[str, Any]) -> str:
            return f"{name}{punct}{context['map_index']}"

        greet.partial(punct="!").expand(name=names())
    greet_task = dag.tasks["greet"]
    context = {"map_index": 1, "upstream": {"names": ["a", "b"]}, "task_id": "greet"}
    assert run_task(greet_task, context) == "b!1"
    with pytest.raises(LookupError, match="runs as one of its indexes"):
        run_task(greet_task, {"map_index": None, "upstream": {"names": ["a"]}})


def test_the_upstream_checks_what_it_returns() -> None:
    output = {"limit": 3, "consumer": "load", "kwargs": False}
    check_map_output(None, output, 10, "up")  # no items
    check_map_output({"a": 1}, output, 10, "up")
    with pytest.raises(MapInputError, match="is a str: a mapped task expands over a list"):
        check_map_output("abc", output, 10, "up")
    with pytest.raises(MapInputError, match="returned 4 items, more than max_map_length 3 of"):
        check_map_output([1, 2, 3, 4], output, 10, "up")
    with pytest.raises(MapInputError, match="max_map_length 2"):  # the deployment's cap
        check_map_output([1, 2, 3], output, 2, "up")
    with pytest.raises(MapInputError, match="expand_kwargs needs a dict"):
        check_map_output([1], {**output, "kwargs": True}, 10, "up")


def test_the_readme_mapping_example_is_the_example_file() -> None:
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    block = readme.split("### Mapping")[1].split("```python")[1].split("```")[0]
    assert block.strip() == EXAMPLE.read_text().strip()
