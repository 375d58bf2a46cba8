"""Watched sources on real processes: a watch over a folder yields a run key per file,
each key makes one run, ever (the watch yields every key at every evaluation), across a
restart of the scheduler and the triggerer; the cursor comes back to the next
evaluation; a watch that raises is that DAG's error and the other DAGs go on.

Real PostgreSQL, Redis, `sluice scheduler`, `sluice worker` and `sluice triggerer`.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.procs import Sluice, wait_until

DAGS = """
import pathlib
from datetime import timedelta
import sluice
from sluice import DAG, task

INBOX = pathlib.Path({inbox!r})

def files(context):
    seen = int(context["cursor"] or 0)
    names = sorted(p.name for p in INBOX.iterdir())
    context["set_cursor"](str(max(seen, len(names))))
    for name in names:  # every key, every time: each makes one run
        yield sluice.RunRequest(run_key=name, conf={{"file": name, "cursor_was": seen}})

def broken(context):
    raise RuntimeError("the bucket answered 403")

def hangs(context):
    import time
    time.sleep(60)

with DAG("per_file", schedule=sluice.Watch(files, interval=timedelta(seconds=0.5))):
    @task
    def process(context):
        return context["conf"]

with DAG("broken_watch", schedule=sluice.Watch(broken, interval=timedelta(seconds=0.5))):
    @task
    def never():
        pass

with DAG("hanging_watch", schedule=sluice.Watch(hangs, interval=timedelta(seconds=0.5), timeout=1)):
    @task
    def not_yet():
        pass
"""


def runs(sluice: Sluice, dag_id: str) -> list[dict[str, Any]]:
    with sluice._connect() as conn:
        rows = conn.exec_driver_sql(
            "SELECT run_id, run_type, state, conf FROM dag_run "
            f"WHERE dag_id = '{dag_id}' ORDER BY id"
        ).all()
    return [{"run_id": r[0], "run_type": r[1], "state": r[2], "conf": _json(r[3])} for r in rows]


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def watch_errors(sluice: Sluice, count: int) -> dict[str, str] | None:
    listed = json.loads(sluice.ok("dags", "list", "--json"))
    errors = {d["dag_id"]: d["watch_error"] for d in listed if d.get("watch_error")}
    return errors if len(errors) == count else None


def succeeded(sluice: Sluice, count: int) -> list[dict[str, Any]] | None:
    found = runs(sluice, "per_file")
    return found if len(found) == count and all(r["state"] == "success" for r in found) else None


@pytest.mark.timeout(180)
def test_a_watch_makes_one_run_per_key_across_restarts(sluice: Sluice, tmp_path: Path) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (sluice.dags_folder / "watched.py").write_text(textwrap.dedent(DAGS.format(inbox=str(inbox))))
    scheduler = sluice.scheduler()
    sluice.worker()
    triggerer = sluice.start("triggerer", "triggerer")
    for name in ("sample-1.fastq", "sample-2.fastq", "sample 3.fastq"):
        (inbox / name).write_text("ACGT")
    three = wait_until(lambda: succeeded(sluice, 3), timeout=60)
    assert {r["conf"]["file"] for r in three} == {
        "sample-1.fastq",
        "sample-2.fastq",
        "sample 3.fastq",
    }
    assert all(r["run_type"] == "watch" for r in three)
    assert "watch__sample-1.fastq" in {r["run_id"] for r in three}

    # the broken watch is that DAG's error; the other DAGs go on
    errors = wait_until(lambda: watch_errors(sluice, 2), timeout=30)
    assert "RuntimeError: the bucket answered 403" in errors["broken_watch"]
    assert "past its timeout (1s)" in errors["hanging_watch"]
    assert "per_file" not in errors
    # a failing watch stops no other run of its DAG
    manual = sluice.trigger("broken_watch")
    assert sluice.wait_run("broken_watch", manual, timeout=60) == "success"
    assert "watch failed: RuntimeError: the bucket answered 403" in sluice.run("dags", "list")

    sluice.stop(scheduler)
    sluice.stop(triggerer)
    sluice.scheduler()
    sluice.start("triggerer", "triggerer")
    (inbox / "sample-4.fastq").write_text("ACGT")
    four = wait_until(lambda: succeeded(sluice, 4), timeout=60)
    last = four[-1]["conf"]
    assert last["file"] == "sample-4.fastq" and last["cursor_was"] == 3  # the cursor came back

    # the watch goes on yielding the four keys: no fifth run
    state = json.loads(sluice.ok("dags", "watch-state", "per_file", "--json"))
    evaluations = state["evaluations"]
    wait_until(
        lambda: (
            json.loads(sluice.ok("dags", "watch-state", "per_file", "--json"))["evaluations"]
            >= evaluations + 2
        ),
        timeout=30,
    )
    assert len(runs(sluice, "per_file")) == 4
    state = json.loads(sluice.ok("dags", "watch-state", "per_file", "--json"))
    assert state["cursor"] == "4" and state["error"] is None
    assert {k["run_key"] for k in state["keys"]} == {
        "sample-1.fastq",
        "sample-2.fastq",
        "sample 3.fastq",
        "sample-4.fastq",
    }
    broken = sluice.ok("dags", "watch-state", "broken_watch")
    assert "RuntimeError: the bucket answered 403" in broken
