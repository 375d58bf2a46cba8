"""Workers per queue, asked of a real `sluice worker`, and what explain makes of it."""

from __future__ import annotations

import json
import time

from sluice.scheduler.control.workers import map_active_queues, workers_by_queue
from sluice.scheduler.core.settings import Settings
from sluice.scheduler.core.states import TI
from tests.operators.helpers import World
from tests.procs import Sluice, wait_until

MIXED = """
with DAG("mixed", schedule=None) as dag:
    task(task_id="light")(lambda: None)
    task(task_id="hard", queue="heavy")(lambda: None)
"""


def test_explain_says_whether_a_real_worker_serves_the_queue(sluice: Sluice) -> None:
    # Given a worker serving only the 'heavy' queue, and one TI queued in each queue
    settings = Settings(
        database_url=sluice.database_url, broker_url=sluice.broker_url, namespace=sluice.namespace
    )
    sluice.worker("heavy", concurrency=1)
    world = World(sluice.database_url, sluice.dags_folder, namespace=sluice.namespace)
    try:
        world.dags(MIXED)
        world.scheduler_job()
        world.trigger("mixed", "r1")
        world.advance("mixed", "r1", "light", TI.QUEUED)
        world.advance("mixed", "r1", "hard", TI.QUEUED)
    finally:
        world.close()
    found = wait_until(lambda: workers_by_queue(settings, timeout=0.5).get("heavy"), timeout=30)
    assert len(found) == 1 and found[0].startswith("sluice@")

    # When each is explained through the CLI; Then 'default' has no worker, 'heavy' has it
    light = json.loads(sluice.ok("tasks", "explain", "mixed", "r1", "light", "--json"))
    kinds = [r["kind"] for r in light["reasons"]]
    assert kinds == ["queued", "no_worker"], light
    assert light["reasons"][0]["served"] is False
    assert light["reasons"][0]["celery_queue"] == f"{sluice.namespace}.default"
    assert light["reasons"][1]["queues_served"] == ["callbacks", "heavy"]

    hard = json.loads(sluice.ok("tasks", "explain", "mixed", "r1", "hard", "--json"))
    assert [r["kind"] for r in hard["reasons"]] == ["queued"]
    assert hard["reasons"][0]["workers"] == found
    assert hard["notes"] == []

    text = sluice.ok("tasks", "explain", "mixed", "r1", "light")
    assert "no worker serves queue 'default'" in text
    assert text.splitlines()[0].startswith("mixed / r1 / light: queued")


def test_explain_cli_unknown_task_is_one_line_and_exit_2(sluice: Sluice) -> None:
    world = World(sluice.database_url, sluice.dags_folder)
    try:
        world.dags(MIXED)
        world.trigger("mixed", "r1")
    finally:
        world.close()
    done = sluice.cli("tasks", "explain", "mixed", "r1", "nope", "--workers-timeout", "0")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "sluice: error: run 'r1' of DAG 'mixed' has no task 'nope'"
    ]


def test_a_down_broker_gives_an_empty_map_and_a_note_at_once() -> None:
    started = time.monotonic()
    found = workers_by_queue(Settings(broker_url="redis://127.0.0.1:1/0"), timeout=1.0)
    assert found == {} and found.note and "could not ask the workers" in found.note
    assert time.monotonic() - started < 10  # one attempt, no retry loop (a loose bound)


def test_celery_queue_names_map_back_to_sluice_queues() -> None:
    reply = {
        "w2": [{"name": "ns.default"}, {"name": "ns.heavy"}],
        "w1": [{"name": "ns.default"}, {"name": "other.default"}, {"name": "celery"}],
        "w3": None,
    }
    assert map_active_queues(reply, "ns") == {"default": ["w1", "w2"], "heavy": ["w2"]}
    assert map_active_queues(None, "ns") == {}
