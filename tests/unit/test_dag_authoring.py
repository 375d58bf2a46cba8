"""DAG authoring: the public DAG file, chaining, decorators, errors, serialization."""

from __future__ import annotations

import json
import textwrap
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from sluice import DAG, DagDefinitionError, ShellTask, Skip, Task, TriggerRule, Upstream, task
from sluice.tasks.loader import DagCache, list_dag_files, load_file
from sluice.tasks.runtime import run_task
from sluice.tasks.serialize import retry_delay_for, serialize_dag, version_hash

START = datetime(2026, 1, 1, tzinfo=UTC)

ETL_DAG = """
from datetime import datetime, timedelta, timezone
from sluice import DAG, Skip, TriggerRule, task

with DAG("etl", schedule="@daily", start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
         catchup=False, max_active_runs=16, max_active_tasks=32) as dag:
    @task
    def extract():
        return {"rows": 3}

    @task(retries=2, retry_delay=timedelta(seconds=5), queue="heavy",
          trigger_rule=TriggerRule.ALL_DONE)
    def load(context):
        print(context["try_number"], context["run_id"], context["upstream"]["extract"])

    extract >> load        # also a >> [b, c] and [b, c] >> d, and <<
"""


def _noop() -> None:
    return None


@pytest.fixture()
def etl_file(tmp_path: Path) -> Path:
    path = tmp_path / "etl_dag.py"
    path.write_text(ETL_DAG)
    return path


def test_public_dag_file_structure(etl_file: Path) -> None:
    (dag,) = load_file(etl_file)
    assert dag.dag_id == "etl"
    assert dag.fileloc == str(etl_file.resolve())
    assert dag.schedule == "@daily" and dag.start_date == START and dag.catchup is False
    assert list(dag.tasks) == ["extract", "load"]
    extract, load = dag.tasks["extract"], dag.tasks["load"]
    assert extract.downstream_task_ids == {"load"} and load.upstream_task_ids == {"extract"}
    assert (load.retries, load.retry_delay, load.queue) == (2, timedelta(seconds=5), "heavy")
    assert load.trigger_rule is TriggerRule.ALL_DONE
    assert (extract.retries, extract.queue, extract.trigger_rule) == (0, "default", "all_success")
    assert extract.pool is None and extract.pool_slots == 1 and extract.is_branch is False


def test_public_dag_file_runs_with_context(
    etl_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (dag,) = load_file(etl_file)
    assert run_task(dag.tasks["extract"], {}) == {"rows": 3}
    context = {"try_number": 1, "run_id": "manual__1", "upstream": {"extract": {"rows": 3}}}
    assert run_task(dag.tasks["load"], context) is None
    assert capsys.readouterr().out == "1 manual__1 {'rows': 3}\n"


def test_default_fileloc_is_the_defining_file() -> None:
    with DAG("here") as dag:
        pass
    assert dag.fileloc == __file__


def test_chaining_forms_return_right_operand() -> None:
    with DAG("chains") as dag:
        a, b, c, d, e = (Task(n, python_callable=_noop) for n in "abcde")
        assert (a >> [b, c]) == [b, c]
        assert ([b, c] >> d) is d
        assert (d >> e) is e
        assert (e << d) is d
        f = Task("f", python_callable=_noop)
        g = Task("g", python_callable=_noop)
        assert ([f, g] << a) is a  # a runs before f and g
        a >> b >> c  # noqa: B018 - a chain; b >> c adds an edge
    assert dag.tasks["a"].downstream_task_ids == {"b", "c", "f", "g"}
    assert dag.tasks["d"].upstream_task_ids == {"b", "c"}
    assert dag.tasks["b"].downstream_task_ids == {"c", "d"}
    assert dag.tasks["f"].upstream_task_ids == {"a"}
    dag.validate()


def test_decorator_forms() -> None:
    with DAG("decorated") as dag:

        @task
        def plain() -> int:
            return 1

        @task()
        def empty_parens() -> int:
            return 2

        @task(task_id="renamed", priority_weight=5, pool="db", pool_slots=2)
        def original() -> int:
            return 3

        def shared(context: dict[str, object]) -> object:
            return context["x"]

        first = task(task_id="first")(shared)
        second = task(task_id="second")(shared)

        @task.branch
        def choose() -> str:
            return "plain"

        @task.branch(retries=1)
        def choose_again() -> str:
            return "plain"

    assert list(dag.tasks) == [
        "plain",
        "empty_parens",
        "renamed",
        "first",
        "second",
        "choose",
        "choose_again",
    ]
    assert isinstance(plain, Task) and plain.python_callable is not None
    assert empty_parens.task_id == "empty_parens"
    assert (original.task_id, original.priority_weight, original.pool) == ("renamed", 5, "db")
    assert first.python_callable is second.python_callable is shared
    assert run_task(second, {"x": 7}) == 7
    assert choose.is_branch and choose_again.is_branch and choose_again.retries == 1
    assert not plain.is_branch


def test_shell_task_options() -> None:
    with DAG("shell") as dag:
        s = ShellTask("echo", "echo hi", env={"A": "1"}, retries=3)
    assert dag.tasks["echo"] is s
    assert (s.kind, s.command, s.env, s.retries) == ("shell", "echo hi", {"A": "1"}, 3)


def test_default_args_supply_defaults_and_explicit_wins() -> None:
    defaults = {"retries": 4, "queue": "q", "retry_delay": 10, "owner": "ignored"}
    with DAG("defaults", default_args=defaults) as dag:
        a = Task("a", python_callable=_noop)
        b = Task("b", python_callable=_noop, retries=0, queue="other")
    assert (a.retries, a.queue, a.retry_delay) == (4, "q", timedelta(seconds=10))
    assert (b.retries, b.queue) == (0, "other")
    assert dag.default_args["owner"] == "ignored"


def test_nested_dag_contexts() -> None:
    with DAG("outer") as outer:
        a = Task("a", python_callable=_noop)
        with DAG("inner") as inner:
            b = Task("b", python_callable=_noop)
        c = Task("c", python_callable=_noop)
    assert a.dag is outer and c.dag is outer and b.dag is inner
    with pytest.raises(DagDefinitionError, match="same DAG"):
        a >> b  # noqa: B018


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dag_id": "bad id!"}, "invalid dag_id"),
        ({"dag_id": "x" * 251}, "invalid dag_id"),
        ({"dag_id": ".."}, "not only dots"),
        ({"dag_id": "."}, "not only dots"),
        ({"dag_id": "a\x1bb"}, "invalid dag_id"),
        ({"dag_id": "trailing\n"}, "invalid dag_id"),
        ({"dag_id": "d", "schedule": "@daily"}, "no start_date"),
        ({"dag_id": "d", "schedule": "@once", "start_date": START}, "unknown schedule preset"),
        ({"dag_id": "d", "schedule": "not a cron", "start_date": START}, "invalid cron"),
        ({"dag_id": "d", "schedule": timedelta(0), "start_date": START}, "positive"),
        ({"dag_id": "d", "schedule": 5, "start_date": START}, "schedule must be"),
        ({"dag_id": "d", "schedule": "@daily", "start_date": datetime(2026, 1, 1)}, "naive"),  # noqa: DTZ001
        ({"dag_id": "d", "start_date": START, "end_date": START - timedelta(1)}, "before"),
        ({"dag_id": "d", "max_active_runs": 0}, "max_active_runs"),
        ({"dag_id": "d", "dagrun_timeout": timedelta(0)}, "dagrun_timeout must be a positive"),
        ({"dag_id": "d", "dagrun_timeout": 60}, "dagrun_timeout must be a positive timedelta"),
    ],
)
def test_dag_validation_on_construction(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(DagDefinitionError, match=message):
        DAG(**kwargs)  # type: ignore[arg-type]


def test_valid_schedules() -> None:
    for schedule in [
        "@hourly",
        "@daily",
        "@weekly",
        "@monthly",
        "@yearly",
        "@annually",
        "@midnight",
        "*/5 * * * *",
        timedelta(hours=6),
        None,
    ]:
        assert DAG("ok", schedule=schedule, start_date=START).schedule == schedule
    tz = timezone(timedelta(hours=2))
    assert DAG("tz", start_date=datetime(2026, 1, 1, 2, tzinfo=tz)).start_date == START


def test_duplicate_task_id() -> None:
    with DAG("dup"), pytest.raises(DagDefinitionError, match="duplicate task_id 'a'"):
        Task("a", python_callable=_noop)
        Task("a", python_callable=_noop)


def test_task_outside_dag() -> None:
    with pytest.raises(DagDefinitionError, match="outside a DAG"):

        @task
        def orphan() -> None:
            return None


def test_bad_task_options() -> None:
    with DAG("opts"):
        with pytest.raises(DagDefinitionError, match="unknown option"):
            Task("a", python_callable=_noop, retires=3)
        with pytest.raises(DagDefinitionError, match="trigger_rule"):
            Task("b", python_callable=_noop, trigger_rule="sometimes")
        with pytest.raises(DagDefinitionError, match="retries"):
            Task("c", python_callable=_noop, retries=-1)
        with pytest.raises(DagDefinitionError, match="invalid task_id"):
            Task("d d", python_callable=_noop)
        with pytest.raises(DagDefinitionError, match="not only dots"):
            Task("..", python_callable=_noop)
        with pytest.raises(DagDefinitionError, match="queued_timeout must be positive"):
            Task("f", python_callable=_noop, queued_timeout=timedelta(0))
        assert Task("v1..2", python_callable=_noop).task_id == "v1..2"
        assert Task("e", python_callable=_noop, trigger_rule="one_success").trigger_rule == (
            TriggerRule.ONE_SUCCESS
        )


def test_cycle_is_reported_with_its_tasks() -> None:
    with DAG("cyclic") as dag:
        a, b, c, d = (Task(n, python_callable=_noop) for n in "abcd")
        d >> a >> b >> c >> a  # noqa: B018
    with pytest.raises(DagDefinitionError, match=r"cycle in DAG 'cyclic': a >> b >> c >> a"):
        dag.validate()
    with DAG("selfloop"):
        x = Task("x", python_callable=_noop)
        with pytest.raises(DagDefinitionError, match="cycle"):
            x >> x  # noqa: B018


def test_calling_a_task_outside_its_dag_is_a_clear_error() -> None:
    with DAG("call"):

        @task
        def f() -> int:
            return 1

    with pytest.raises(DagDefinitionError, match="not a function"):
        f()


def test_a_tasks_output_passed_as_an_argument_links_the_tasks() -> None:
    with DAG("passing") as dag:

        @task
        def list_files() -> list[str]:
            return ["a.csv", "b.csv"]

        @task
        def count(files: list[str], prefix: str) -> str:
            return f"{prefix}{len(files)}"

        @task
        def report(line: str, context: dict[str, Any]) -> dict[str, Any]:
            return {"line": line, "run": context["run_id"]}

        out = report({"in": [count(list_files(), prefix="n=")]})
    assert out == Upstream("report")
    assert dag.tasks["count"].upstream_task_ids == {"list_files"}
    assert dag.tasks["report"].upstream_task_ids == {"count"}
    spec = serialize_dag(dag)["tasks"]
    assert spec["count"]["call"] == {
        "args": [{"$upstream": "list_files"}],
        "kwargs": {"prefix": "n="},
    }
    assert spec["list_files"]["call"] == {"args": [], "kwargs": {}}
    # the worker resolves the outputs from the upstream results
    upstream = {"list_files": ["a.csv", "b.csv"], "count": "n=2"}
    assert run_task(dag.tasks["count"], {"upstream": upstream}) == "n=2"
    assert run_task(dag.tasks["report"], {"upstream": upstream, "run_id": "r1"}) == {
        "line": {"in": ["n=2"]},
        "run": "r1",
    }
    assert dag.tasks["report"].reads_upstream and not dag.tasks["list_files"].reads_upstream


def test_bad_calls_of_a_task_are_clear_errors() -> None:
    with DAG("bad_calls"):

        @task
        def one(x: int) -> int:
            return x

        @task
        def free() -> int:
            return 1

        with pytest.raises(DagDefinitionError, match="called with bad arguments"):
            one(1, 2)
        with pytest.raises(DagDefinitionError, match="called with bad arguments"):
            one()
        with pytest.raises(DagDefinitionError, match="`context` is passed by the worker"):
            one(1, context={})
        with pytest.raises(DagDefinitionError, match="not a task of DAG 'bad_calls'"):
            one(Upstream("nope"))
        one(free())
        with pytest.raises(DagDefinitionError, match="called twice"):
            one(2)
        with pytest.raises(DagDefinitionError, match="shell task: it takes no call arguments"):
            ShellTask("sh", "true")()


def test_skip_is_an_exception() -> None:
    assert issubclass(Skip, Exception)


def _spec_dag(retries: int = 1) -> DAG:
    with DAG("ser", schedule=timedelta(hours=1), start_date=START, description="d") as dag:
        a = Task(
            "a", python_callable=_noop, retries=retries, execution_timeout=timedelta(minutes=1)
        )
        b = ShellTask("b", "true", max_retry_delay=timedelta(seconds=60))
        c = Task("c", python_callable=_noop, is_branch=True)
        a >> [c, b]  # noqa: B018
    return dag


def test_serialize_format_and_round_trip() -> None:
    spec = serialize_dag(_spec_dag())
    assert json.loads(json.dumps(spec)) == spec
    assert set(spec) == {
        "dag_id",
        "fileloc",
        "description",
        "schedule",
        "start_date",
        "end_date",
        "catchup",
        "max_active_runs",
        "max_active_tasks",
        "tasks",
    }
    assert spec["schedule"] == {"seconds": 3600.0}
    assert spec["start_date"] == "2026-01-01T00:00:00+00:00" and spec["end_date"] is None
    assert list(spec["tasks"]) == ["a", "b", "c"]
    assert spec["tasks"]["a"] == {
        "task_id": "a",
        "kind": "python",
        "upstream": [],
        "downstream": ["b", "c"],
        "trigger_rule": "all_success",
        "retries": 1,
        "retry_delay": 300.0,
        "retry_exponential_backoff": False,
        "max_retry_delay": None,
        "execution_timeout": 60.0,
        "queue": "default",
        "pool": None,
        "pool_slots": 1,
        "priority_weight": 1,
        "is_branch": False,
    }
    assert spec["tasks"]["b"]["kind"] == "shell" and spec["tasks"]["b"]["upstream"] == ["a"]
    assert spec["tasks"]["c"]["is_branch"] is True


def test_version_hash_stable_and_sensitive() -> None:
    first, again = serialize_dag(_spec_dag()), serialize_dag(_spec_dag())
    assert version_hash(first) == version_hash(again)
    assert len(version_hash(first)) == 64
    moved = dict(first, fileloc="/elsewhere/x.py")
    assert version_hash(moved) == version_hash(first)
    assert version_hash(serialize_dag(_spec_dag(retries=2))) != version_hash(first)


def test_retry_delay_with_backoff_and_cap() -> None:
    spec = {"retry_delay": 10.0, "retry_exponential_backoff": False, "max_retry_delay": None}
    assert retry_delay_for(spec, 1) == retry_delay_for(spec, 5) == timedelta(seconds=10)
    backoff = dict(spec, retry_exponential_backoff=True)
    assert [retry_delay_for(backoff, n).total_seconds() for n in (1, 2, 3, 4)] == [10, 20, 40, 80]
    assert retry_delay_for(backoff, 100) == timedelta(hours=24)
    capped = dict(backoff, max_retry_delay=30.0)
    assert retry_delay_for(capped, 3) == timedelta(seconds=30)
    assert retry_delay_for(dict(spec, max_retry_delay=5.0), 1) == timedelta(seconds=5)
    with pytest.raises(ValueError):
        retry_delay_for(spec, 0)


def test_list_dag_files(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "_private").mkdir()
    (tmp_path / "a.py").write_text("from sluice import DAG\n")
    (tmp_path / "sub" / "b.py").write_text("# my dag\n")
    (tmp_path / "helper.py").write_text("X = 1\n")
    (tmp_path / "_skip.py").write_text("DAG\n")
    (tmp_path / "_private" / "c.py").write_text("DAG\n")
    (tmp_path / ".hidden.py").write_text("DAG\n")
    (tmp_path / "notes.txt").write_text("DAG\n")
    assert list_dag_files(tmp_path) == [tmp_path / "a.py", tmp_path / "sub" / "b.py"]
    assert list_dag_files(tmp_path / "missing") == []


def test_loader_sibling_import_and_dag_cache(tmp_path: Path) -> None:
    (tmp_path / "helpers_for_cache.py").write_text("VALUE = 41\n")
    dag_file = tmp_path / "cached_dag.py"
    body = textwrap.dedent("""
        from sluice import DAG, task
        from helpers_for_cache import VALUE
        with DAG("{dag_id}"):
            @task
            def answer():
                return VALUE + {inc}
    """)
    dag_file.write_text(body.format(dag_id="cached", inc=1))
    cache = DagCache()
    dag = cache.get_dag(str(dag_file), "cached")
    assert run_task(dag.tasks["answer"], {}) == 42
    assert cache.get_dag(dag_file, "cached") is dag
    with pytest.raises(KeyError, match="'other' is not defined in"):
        cache.get_dag(dag_file, "other")
    dag_file.write_text(body.format(dag_id="cached", inc=2) + "\n# changed\n")
    reloaded = cache.get_dag(dag_file, "cached")
    assert reloaded is not dag and run_task(reloaded.tasks["answer"], {}) == 43


def test_loader_validates_and_rejects_duplicates(tmp_path: Path) -> None:
    twice = tmp_path / "twice.py"
    twice.write_text("from sluice import DAG\nA = DAG('same')\nB = DAG('same')\n")
    with pytest.raises(DagDefinitionError, match="defined twice"):
        load_file(twice)
    factory = tmp_path / "factory.py"
    factory.write_text(
        textwrap.dedent("""
        from sluice import DAG
        def make(i):
            return DAG(f"made_{i}")
        for i in range(3):
            make(i)
    """)
    )
    assert [d.dag_id for d in load_file(factory)] == ["made_0", "made_1", "made_2"]


def test_timeouts_are_serialized_only_when_set() -> None:
    plain = serialize_dag(_spec_dag())
    assert "dagrun_timeout" not in plain
    assert all("queued_timeout" not in t for t in plain["tasks"].values())
    with DAG("timed", dagrun_timeout=timedelta(minutes=5)) as dag:
        Task("t", python_callable=_noop, queued_timeout=timedelta(seconds=30))
    spec = serialize_dag(dag)
    assert spec["dagrun_timeout"] == 300.0
    assert spec["tasks"]["t"]["queued_timeout"] == 30.0
