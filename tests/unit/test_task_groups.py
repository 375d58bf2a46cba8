"""Task groups in a DAG file: ids and nesting, links, `@task_group`, mapped groups
compiled onto per-index mapping, the serialized form, and the one-line errors."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import sluice
from sluice import DAG, DagDefinitionError, ShellTask, TaskGroup, task, task_group
from sluice.tasks.loader import load_file
from sluice.tasks.mapping import MapSpec
from sluice.tasks.runtime import run_task
from sluice.tasks.serialize import serialize_dag, version_hash
from sluice.tasks.task_group import GroupOutput, group_task_ids

README = Path(__file__).parents[2] / "README.md"


def _ups(dag: DAG) -> dict[str, list[str]]:
    return {tid: sorted(t.upstream_task_ids) for tid, t in dag.tasks.items()}


def test_the_names_are_exported() -> None:
    assert sluice.TaskGroup is TaskGroup and sluice.task_group is task_group
    assert {"TaskGroup", "task_group"} <= set(sluice.__all__)


def test_ids_nesting_and_prefix_group_id() -> None:
    with DAG("ids", schedule=None) as dag:
        with TaskGroup("extract") as extract:
            ShellTask("load", command="true")
            with TaskGroup("inner") as inner:
                ShellTask("a", command="true")
            with TaskGroup("flat", prefix_group_id=False) as flat:
                ShellTask("b", command="true")
        with TaskGroup("top", prefix_group_id=False, tooltip="t") as top:
            ShellTask("c", command="true")
    assert list(dag.tasks) == ["extract.load", "extract.inner.a", "extract.b", "c"]
    assert inner.group_id == "extract.inner" and inner.parent is extract
    assert flat.group_id == "extract.flat" and top.group_id == "top"
    assert [t.task_id for t in extract.tasks] == ["extract.load", "extract.inner.a", "extract.b"]
    assert [t.task_id for t in extract.own_tasks] == ["extract.load"]
    assert list(dag.task_groups) == ["extract", "extract.inner", "extract.flat", "top"]
    assert dag.tasks["extract.inner.a"].task_group is inner


def test_links_with_tasks_lists_and_groups() -> None:
    with DAG("links", schedule=None) as dag:
        start = ShellTask("start", command="true")
        with TaskGroup("g") as g:
            a = ShellTask("a", command="true")
            b = ShellTask("b", command="true")
            c = ShellTask("c", command="true")
            a.set_downstream([b, c])
        with TaskGroup("g2") as g2:
            d = ShellTask("d", command="true")
            e = ShellTask("e", command="true")
        end = ShellTask("end", command="true")
        other = ShellTask("other", command="true")
        start >> g >> g2 >> end
        [other] >> g2
        g2 << ShellTask("before", command="true")
    assert [t.task_id for t in g.roots] == ["g.a"] and [t.task_id for t in g.leaves] == [
        "g.b",
        "g.c",
    ]
    ups = _ups(dag)
    assert ups["g.a"] == ["start"]
    assert ups["g2.d"] == ups["g2.e"] == ["before", "g.b", "g.c", "other"]
    assert ups["end"] == ["g2.d", "g2.e"]
    assert d.upstream_task_ids == e.upstream_task_ids and a.task_id == "g.a"
    assert end.upstream_task_ids == {"g2.d", "g2.e"}


def test_an_empty_group_links_nothing_with_one_line() -> None:
    with DAG("empty", schedule=None):
        t = ShellTask("t", command="true")
        g = TaskGroup("g")
        with pytest.raises(DagDefinitionError, match="^task group 'g' of DAG 'empty' has no tasks"):
            t >> g


def test_the_decorator_names_each_call_and_returns_the_output() -> None:
    with DAG("deco", schedule=None) as dag:

        @task
        def start() -> int:
            return 1

        @task_group
        def steps(x: Any) -> Any:
            @task
            def add(v: int) -> int:
                return v + 1

            @task
            def double(v: int) -> int:
                return v * 2

            return double(add(x))

        @task_group(group_id="quiet")
        def side() -> None:
            ShellTask("noop", command="true")

        @task
        def total(a: int, b: int) -> int:
            return a + b

        one = steps(start())
        two = steps(one)
        total(one, two)
        s = side()
        start >> s >> total
    assert isinstance(one, GroupOutput) and one.task_id == "steps.double"
    assert isinstance(two, GroupOutput) and two.task_id == "steps__1.double"
    assert isinstance(s, TaskGroup) and s.group_id == "quiet"
    ups = _ups(dag)
    assert ups["steps.add"] == ["start"]
    assert ups["steps__1.add"] == ["steps.double"]
    assert ups["total"] == ["quiet.noop", "steps.double", "steps__1.double"]
    assert ups["quiet.noop"] == ["start"]
    assert dag.tasks["steps__1.add"].bound_call == ((sluice.Upstream("steps.double"),), {})


def test_the_output_links_as_the_group() -> None:
    with DAG("out", schedule=None) as dag:
        first = ShellTask("first", command="true")
        last = ShellTask("last", command="true")

        @task_group
        def chain() -> Any:
            @task
            def a() -> int:
                return 1

            @task
            def b(v: int) -> int:
                return v

            return b(a())

        first >> chain() >> last
    ups = _ups(dag)
    assert ups["chain.a"] == ["first"] and ups["last"] == ["chain.b"]


def test_serialized_groups_and_version_hash() -> None:
    def build(with_group: bool) -> dict[str, Any]:
        with DAG("ser", schedule=None) as dag:
            if with_group:
                with TaskGroup("g", tooltip="the g"), TaskGroup("h"):
                    ShellTask("t", command="true")
            else:
                ShellTask("t", command="true")
        return serialize_dag(dag)

    plain = build(False)
    assert "groups" not in plain
    grouped = build(True)
    assert grouped["groups"] == {
        "g": {"parent": None, "tasks": [], "tooltip": "the g"},
        "g.h": {"parent": "g", "tasks": ["g.h.t"]},
    }
    assert version_hash(plain) != version_hash(grouped)
    assert group_task_ids(grouped["groups"], "g") == ["g.h.t"]
    assert group_task_ids(grouped["groups"], "g.h") == ["g.h.t"]
    assert group_task_ids(grouped["groups"], "nope") == []


def _mapped_dag() -> DAG:
    with DAG("mapped", schedule=None) as dag:

        @task
        def list_files() -> list[str]:
            return ["a", "b", "c"]

        @task_group
        def per_file(path: str, table: str) -> Any:
            @task
            def load(path: str, table: str) -> str:
                return f"{table}:{path}"

            @task
            def check(loaded: str) -> str:
                return loaded + "!"

            @task
            def notify() -> None:
                return None

            checked = check(load(path, table))
            checked >> notify
            return checked

        @task
        def total(results: list[str]) -> int:
            return len(results)

        total(per_file.partial(table="raw").expand(path=list_files()))
    return dag


def test_a_mapped_group_compiles_onto_per_index_mapping() -> None:
    dag = _mapped_dag()
    load, check, notify = (dag.tasks[f"per_file.{n}"] for n in ("load", "check", "notify"))
    assert load.map == MapSpec("product", (("path", sluice.Upstream("list_files")),))
    assert load.bound_call == ((), {"table": "raw"})
    assert check.per_index == "per_file.load"
    assert notify.map == MapSpec("product", ()) and notify.per_index == "per_file.check"
    spec = serialize_dag(dag)
    assert spec["tasks"]["per_file.notify"]["map"] == {
        "mode": "product",
        "args": [],
        "per_index": "per_file.check",
    }
    assert spec["tasks"]["per_file.load"]["upstream"] == ["list_files"]
    assert spec["tasks"]["list_files"]["map_output"]["consumer"] == "per_file.load"
    assert spec["tasks"]["total"]["upstream"] == ["per_file.check"]
    assert spec["groups"]["per_file"]["map"] == {
        "mode": "product",
        "args": [["path", {"$upstream": "list_files"}]],
    }
    # what each index is called with: its own items, one to one
    ctx = {"map_index": 1, "upstream": {"list_files": ["a", "b", "c"]}}
    assert run_task(load, ctx) == "raw:b"
    assert run_task(check, {"map_index": 1, "upstream": {"per_file.load": "raw:b"}}) == "raw:b!"
    assert run_task(notify, {"map_index": 1, "upstream": {}}) is None


def test_a_mapped_group_over_a_literal_list() -> None:
    with DAG("literal", schedule=None) as dag:

        @task_group
        def each(n: int) -> None:
            @task
            def square(n: int) -> int:
                return n * n

            square(n)

        each.expand(n=[1, 2, 3])
    square = dag.tasks["each.square"]
    assert square.map == MapSpec("product", (("n", [1, 2, 3]),))
    assert run_task(square, {"map_index": 2, "upstream": {}}) == 9


def _orphan(x: Any) -> None:
    _ident.override(task_id="a")(x)
    _ident.override(task_id="b")(1)


def _nested(x: Any) -> None:
    _ident.override(task_id="a")([x])


def _shell(x: Any) -> None:
    ShellTask("sh", command="true") << _ident.override(task_id="a")(x)


def _two(x: Any) -> None:
    a = _ident.override(task_id="a")(x)
    b = _ident.override(task_id="b")(x)
    _pair.override(task_id="c")(a, b)


class _Maker:
    """`@task(task_id=...)` of a function, made where it is called (inside the group)."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def override(self, task_id: str) -> Any:
        return task(task_id=task_id)(self.fn)


def _ident_fn(x: Any) -> Any:
    return x


def _pair_fn(x: Any, y: Any) -> Any:
    return x


_ident, _pair = _Maker(_ident_fn), _Maker(_pair_fn)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (_orphan, "task 'g.b' of mapped task group 'g' takes none of the group's arguments"),
        (_nested, "is passed the group's argument inside a list or dict"),
        (_shell, "task 'g.sh' of mapped task group 'g' is a shell task"),
        (_two, "task 'g.c' of mapped task group 'g' takes the output of g.a, g.b"),
    ],
)
def test_mapped_group_errors_are_one_line(body: Any, message: str) -> None:
    with DAG("bad", schedule=None):
        grp = task_group(group_id="g")(body)
        with pytest.raises(DagDefinitionError) as caught:
            grp.expand(x=[1, 2])
    text = str(caught.value)
    assert message in text and "\n" not in text


def test_a_task_made_outside_a_mapped_group_is_refused() -> None:
    with DAG("outside", schedule=None):
        outer = task(task_id="outer")(_ident_fn)

        def body(x: Any) -> None:
            outer(x)

        with pytest.raises(DagDefinitionError, match="^task 'outer' is passed an argument of"):
            task_group(group_id="g")(body).expand(x=[1])


def test_bad_input_is_one_line() -> None:
    with pytest.raises(DagDefinitionError, match="^task group 'g' is defined outside a DAG"):
        TaskGroup("g")

    @task_group
    def lone() -> None:
        return None

    with pytest.raises(DagDefinitionError, match="^task group 'lone' is called outside a DAG"):
        lone()
    with DAG("dup", schedule=None):
        TaskGroup("g")
        with pytest.raises(DagDefinitionError, match="^duplicate task group id 'g' in DAG 'dup'"):
            TaskGroup("g")
        with pytest.raises(DagDefinitionError, match="is the id of a task group"):
            ShellTask("g", command="true")
        ShellTask("t", command="true")
        with pytest.raises(DagDefinitionError, match="is the id of a task$"):
            TaskGroup("t")
        with pytest.raises(DagDefinitionError, match="invalid task group id 'a.b'"):
            TaskGroup("a.b")
        with pytest.raises(DagDefinitionError, match="expand\\(\\) needs an argument"):
            lone.expand()


def test_the_readme_example_loads(tmp_path: Path) -> None:
    text = README.read_text()
    section = text[text.index("### Task groups") :]
    block = re.search(r"```python\n(.*?)```", section, re.S)
    assert block is not None
    (tmp_path / "groups.py").write_text(block.group(1))
    (dag,) = load_file(tmp_path / "groups.py")
    spec = serialize_dag(dag)
    assert set(spec["groups"]) == {"extract", "per_file"}
    assert spec["tasks"]["per_file.check"]["map"]["per_index"] == "per_file.load"
