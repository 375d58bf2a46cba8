"""Deferred tasks on real processes: `sluice.defer` frees the worker and the pool slot, a
`sluice triggerer` resumes each TI exactly once when its trigger fires (one triggerer
killed under its triggers: the other takes them over), and a trigger that raises fails
its TI with the error in the try's log.

Real PostgreSQL, Redis, `sluice scheduler`, `sluice worker` and `sluice triggerer`. A
resumed task appends `<index> <try_number> <trigger event>` to a file: each TI's run is
read back from it.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import socket
import textwrap
from pathlib import Path

import pytest

from tests.procs import Sluice, wait_until

DAGS = """
import json, pathlib
from datetime import timedelta
import sluice
from sluice import DAG, task
from sluice.triggers import FileExists, RunFinished, Sleep

RECORD = pathlib.Path({record!r})

class Broken(sluice.Trigger):
    def serialize(self):
        return {{}}

    async def run(self):
        raise RuntimeError("the remote system answered 503")
        yield  # an async generator

with DAG("deferring", schedule=None) as deferring:
    @task
    def items():
        return list(range({count}))

    @task
    def wait(i, context):
        if context["trigger_event"] is None:
            sluice.defer(Sleep(timedelta(seconds={sleep})))
        with RECORD.open("a") as f:
            f.write(f"{{i}} {{context['try_number']}} {{json.dumps(context['trigger_event'])}}\\n")

    wait.expand(i=items())

with DAG("gated", schedule=None) as gated:
    @task
    def gate_items():
        return list(range({count}))

    @task
    def behind_the_gate(i, context):
        if context["trigger_event"] is None:
            sluice.defer(FileExists({gate!r}, poke_interval=0.2))
        with RECORD.open("a") as f:
            f.write(f"{{i}} {{context['try_number']}} {{json.dumps(context['trigger_event'])}}\\n")

    behind_the_gate.expand(i=gate_items())

with DAG("busy", schedule=None) as busy:
    @task
    def work(i):
        return i

    work.expand(i=list(range(20)))

with DAG("leader", schedule=None) as leader:
    @task
    def lead():
        return 1

with DAG("follower", schedule=None) as follower:
    @task
    def after_success(context):
        if context["trigger_event"] is None:
            sluice.defer(RunFinished("leader", "lead-1"))
        return context["trigger_event"]

    @task
    def after_failure(context):
        if context["trigger_event"] is None:
            sluice.defer(RunFinished("leader", "lead-1", states=["failed"]))

class Blocking(sluice.Trigger):
    def serialize(self):
        return {{}}

    async def run(self):
        import time
        time.sleep(2)  # blocks the triggers' loop: named in a warning
        yield sluice.TriggerEvent({{"blocked": True}})

with DAG("broken", schedule=None) as broken:
    @task
    def waits_on_a_broken_trigger():
        sluice.defer(Broken())

    @task
    def waits_on_a_blocking_trigger(context):
        if context["trigger_event"] is None:
            sluice.defer(Blocking())
        return context["trigger_event"]
"""


def write_dags(sluice: Sluice, record: Path, count: int, sleep: float) -> Path:
    """The DAG file; the gate file the `gated` DAG's tasks wait for."""
    gate = record.with_name("gate")
    (sluice.dags_folder / "deferring.py").write_text(
        textwrap.dedent(DAGS.format(record=str(record), count=count, sleep=sleep, gate=str(gate)))
    )
    return gate


def count_in(sluice: Sluice, sql: str) -> int:
    with sluice._connect() as conn:
        return int(conn.exec_driver_sql(sql).scalar() or 0)


def resumed(record: Path) -> collections.Counter[int]:
    lines = record.read_text().splitlines() if record.exists() else []
    return collections.Counter(int(line.split()[0]) for line in lines)


@pytest.mark.long
@pytest.mark.timeout(300)
def test_deferred_tasks_free_the_workers_and_each_resumes_once(
    sluice: Sluice, tmp_path: Path
) -> None:
    record = tmp_path / "record.txt"
    write_dags(sluice, record, count=200, sleep=10)
    sluice.scheduler()
    sluice.worker(concurrency=2)
    sluice.start("triggerer", "triggerer")
    run_id = sluice.trigger("deferring")
    wait_until(
        lambda: (
            count_in(sluice, "SELECT count(*) FROM task_instance WHERE state = 'deferred'") >= 100
        ),
        timeout=120,
    )
    busy = sluice.trigger("busy")  # two worker slots, 200 tasks waiting: none holds one
    assert sluice.wait_run("busy", busy, timeout=120) == "success", sluice.logs()
    assert count_in(sluice, "SELECT count(*) FROM task_instance WHERE state = 'deferred'") > 0
    assert sluice.wait_run("deferring", run_id, timeout=240) == "success", sluice.logs()
    ran = resumed(record)
    assert set(ran) == set(range(200)) and set(ran.values()) == {1}, ran  # each once
    lines = record.read_text().splitlines()
    assert {line.split()[1] for line in lines} == {"1"}  # a resume keeps the try number
    assert all('"due": "' in line for line in lines)
    assert count_in(sluice, "SELECT count(*) FROM trigger") == 0


@pytest.mark.timeout(240)
def test_a_killed_triggerers_triggers_are_taken_over_and_resume_once(
    sluice: Sluice, tmp_path: Path
) -> None:
    record = tmp_path / "record.txt"
    gate = write_dags(sluice, record, count=50, sleep=1)
    sluice.scheduler()
    sluice.worker(concurrency=4)
    first = sluice.start("triggerer", "triggerer", "--capacity", "30")
    run_id = sluice.trigger("gated")
    held = "SELECT count(*) FROM trigger WHERE triggerer_id IS NOT NULL"
    wait_until(lambda: count_in(sluice, "SELECT count(*) FROM trigger") == 50, timeout=120)
    wait_until(lambda: count_in(sluice, held) == 30, timeout=60)  # the first is full
    second = sluice.start("triggerer", "triggerer", "--capacity", "50")
    wait_until(lambda: count_in(sluice, held) == 50, timeout=60)
    holders = "SELECT count(DISTINCT triggerer_id) FROM trigger"
    assert count_in(sluice, holders) == 2
    status = json.loads(sluice.run("status", "--json", "--workers-timeout", "0"))
    assert sorted((t["triggers"], t["capacity"]) for t in status["triggerers"]) == [
        (20, 50),
        (30, 30),
    ]
    shown = sluice.run("status", "--workers-timeout", "0")
    assert f"triggerer {socket.gethostname()}:{first.pid} 30/30 triggers, heartbeat" in shown
    explained = sluice.run(
        "tasks", "explain", "gated", run_id, "behind_the_gate", "--map-index", "0"
    )
    assert "waits on its trigger sluice.tasks.triggers.FileExists(path=" in " ".join(
        explained.split()
    ), explained
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    # the survivor takes the dead one's triggers once their leases lapse
    wait_until(lambda: count_in(sluice, holders) == 1 and count_in(sluice, held) == 50, 60)
    gate.touch()
    assert sluice.wait_run("gated", run_id, timeout=180) == "success", sluice.logs()
    ran = resumed(record)
    assert set(ran) == set(range(50)) and set(ran.values()) == {1}, ran
    assert second.poll() is None


@pytest.mark.timeout(120)
def test_a_trigger_that_raises_fails_its_task_and_one_that_blocks_is_named(
    sluice: Sluice, tmp_path: Path
) -> None:
    write_dags(sluice, tmp_path / "record.txt", count=1, sleep=1)
    sluice.scheduler()
    sluice.worker()
    sluice.start("triggerer", "triggerer")
    run_id = sluice.trigger("broken")
    assert sluice.wait_run("broken", run_id, timeout=90) == "failed", sluice.logs()
    ti = sluice.db_task_states("broken", run_id)["waits_on_a_broken_trigger"]
    assert ti["state"] == "failed" and ti["try_number"] == 1, ti
    assert "the remote system answered 503" in ti["error"], ti
    shown = sluice.ok("tasks", "logs", "broken", run_id, "waits_on_a_broken_trigger")
    assert "RuntimeError: the remote system answered 503" in shown, shown
    # a trigger that blocks the loop still fires, and is named in the triggerer's log
    assert sluice.db_task_states("broken", run_id)["waits_on_a_blocking_trigger"]["state"] == (
        "success"
    )
    assert ":Blocking of TI " in sluice.logs() and "triggers' loop is blocked" in sluice.logs()


@pytest.mark.timeout(120)
def test_a_task_waits_for_another_dags_run_to_end(sluice: Sluice, tmp_path: Path) -> None:
    write_dags(sluice, tmp_path / "record.txt", count=1, sleep=1)
    sluice.scheduler()
    sluice.worker()
    sluice.start("triggerer", "triggerer")
    run_id = sluice.trigger("follower")
    wait_until(
        lambda: (
            count_in(sluice, "SELECT count(*) FROM task_instance WHERE state = 'deferred'") == 2
        ),
        timeout=60,
    )
    sluice.trigger("leader", "--run-id", "lead-1")
    assert sluice.wait_run("follower", run_id, timeout=90) == "failed", sluice.logs()
    states = sluice.db_task_states("follower", run_id)
    assert states["after_success"]["state"] == "success", states
    assert states["after_failure"]["state"] == "failed", states
    assert (
        "the awaited run leader.lead-1 ended success, not failed"
        in (states["after_failure"]["error"])
    )
    with sluice._connect() as conn:
        result = conn.exec_driver_sql(
            "SELECT result FROM task_instance WHERE task_id = 'after_success'"
        ).scalar()
    assert json.loads(str(result)) == {"dag_id": "leader", "run_id": "lead-1", "state": "success"}
