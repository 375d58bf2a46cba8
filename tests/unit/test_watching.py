"""A watch's evaluation in its subprocess: its requests and cursor, its prints kept off
the answer, and each way it can go wrong is one line (raises, hangs, yields junk, a conf
over the bound); an answer is checked again as untrusted."""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

import pytest

from sluice.tasks.watching import Evaluation, evaluate

DAG_FILE = """
import sluice
from sluice import DAG, task

def good(context):
    print("a print goes to stderr")
    context["set_cursor"]((context["cursor"] or "") + "+")
    yield sluice.RunRequest("k1", conf={"n": 1})
    yield sluice.RunRequest("k2")

def raises(context):
    raise ValueError("no bucket")

def hangs(context):
    import time
    time.sleep(30)

def junk(context):
    return ["not a request"]

def big(context):
    return [sluice.RunRequest("k", conf={"x": "y" * 5000})]

def deep(context):
    conf = {}
    for _ in range(40):
        conf = {"in": conf}
    return [sluice.RunRequest("k", conf=conf)]

for name, fn in [("good", good), ("raises", raises), ("hangs", hangs), ("junk", junk),
                 ("big", big), ("deep", deep)]:
    with DAG(name, schedule=sluice.Watch(fn, interval=1, timeout=1)):
        @task
        def t():
            pass
"""


@pytest.fixture
def dag_file(tmp_path: Path) -> str:
    path = tmp_path / "watched.py"
    path.write_text(textwrap.dedent(DAG_FILE))
    return str(path)


def run(dag_file: str, dag_id: str, cursor: str | None = None) -> Evaluation:
    return evaluate(dag_file, dag_id, cursor, timeout=1.0, max_conf_bytes=1024, max_conf_depth=32)


def test_a_watch_gives_its_requests_and_cursor(dag_file: str) -> None:
    done = run(dag_file, "good", "a")
    assert done.error is None and done.cursor == "a+"
    assert [(r.run_key, r.conf) for r in done.requests] == [("k1", {"n": 1}), ("k2", {})]


def test_each_failure_is_one_line(dag_file: str) -> None:
    assert "ValueError: no bucket" in (run(dag_file, "raises").error or "")
    started = time.monotonic()
    assert "past its timeout (1s)" in (run(dag_file, "hangs").error or "")
    assert time.monotonic() - started < 10
    assert "yields sluice.RunRequest, got str" in (run(dag_file, "junk").error or "")
    assert "at most 1024 are allowed" in (run(dag_file, "big").error or "")
    assert "nested more than 32 levels deep" in (run(dag_file, "deep").error or "")
    assert "has no watch" in (run(dag_file, "no_such_dag").error or "")
    for dag_id in ("raises", "hangs", "junk", "big", "deep"):
        assert "\n" not in (run(dag_file, dag_id).error or "")


@pytest.mark.parametrize(
    "answer",
    [[], {"requests": "x"}, {"requests": [{"run_key": ""}]}, {"requests": [], "cursor": 5}],
)
def test_an_answer_is_checked_again(answer: object) -> None:
    assert Evaluation.of(answer, None, 1024, 32).error is not None
