"""Sensors (`@task.sensor`) on real processes: a reschedule-mode sensor frees its worker and
its pool slot between pokes, keeps its try number, goes on under another scheduler when
the one that rescheduled it is killed, and counts its timeout across pokes;
a poke-mode sensor keeps its try running; past the timeout a sensor fails, or is skipped
with `soft_fail`.

Real PostgreSQL, Redis, `sluice scheduler` and `sluice worker`. Each poke appends a line to
a file (`<task> <try_number>`), so the pokes and the try each was made in are read back.
"""

from __future__ import annotations

import os
import signal
import textwrap
from pathlib import Path

from tests.procs import Sluice, wait_until

DAGS = """
import pathlib
from datetime import timedelta
from sluice import DAG, PokeReturnValue, task

POKES = pathlib.Path({pokes!r})
OTHER_DONE = pathlib.Path({other_done!r})

def poked(context):
    with POKES.open("a") as f:
        f.write(f"{{context['task_id']}} {{context['try_number']}}\\n")
    return sum(1 for line in POKES.read_text().splitlines()
               if line.split()[0] == context["task_id"])

with DAG("sensing", schedule=None) as sensing:
    @task.sensor(poke_interval=timedelta(seconds=1), timeout=timedelta(seconds=60),
                 mode="reschedule", pool="one")
    def wait_for_other(context):
        pokes = poked(context)
        return PokeReturnValue(pokes >= 3 and OTHER_DONE.exists(), xcom_value=f"after {{pokes}}")

with DAG("other", schedule=None) as other:
    @task(pool="one")
    def take_the_slot():
        OTHER_DONE.touch()

with DAG("timeouts", schedule=None) as timeouts:
    @task.sensor(poke_interval=0.3, timeout=1.5, mode="reschedule", retries=3)
    def never():
        return False

    @task.sensor(poke_interval=0.3, timeout=1.5, mode="reschedule", soft_fail=True)
    def never_soft():
        return False

    @task.sensor(poke_interval=0.2, timeout=30, mode="poke")
    def in_poke_mode(context):
        return poked(context) >= 3
"""


def pokes_of(path: Path, task_id: str) -> list[int]:
    lines = path.read_text().splitlines() if path.exists() else []
    return [int(line.split()[1]) for line in lines if line.split()[0] == task_id]


def test_a_reschedule_sensor_frees_its_slot_between_pokes(sluice: Sluice, tmp_path: Path) -> None:
    pokes, other_done = tmp_path / "pokes.txt", tmp_path / "other_done"
    (sluice.dags_folder / "sensors.py").write_text(
        textwrap.dedent(DAGS.format(pokes=str(pokes), other_done=str(other_done)))
    )
    sluice.run("pools", "set", "one", "1")
    first = sluice.scheduler()
    sluice.worker(concurrency=2)
    sensing = sluice.trigger("sensing")
    wait_until(lambda: pokes_of(pokes, "wait_for_other"), timeout=60)
    wait_until(
        lambda: (
            sluice.db_task_states("sensing", sensing)["wait_for_other"]["state"]
            == "up_for_reschedule"
        ),
        timeout=30,
    )
    # what the sensor waits with is in the database: another scheduler takes it on
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    sluice.scheduler()
    other = sluice.trigger("other")  # its one-slot pool is free while the sensor waits
    assert sluice.wait_run("other", other, timeout=60) == "success", sluice.logs()
    assert sluice.wait_run("sensing", sensing, timeout=60) == "success", sluice.logs()

    sensor = sluice.task_states("sensing", sensing)["wait_for_other"]
    taken = sluice.task_states("other", other)["take_the_slot"]
    assert sensor["try_number"] == 1, sensor
    made = pokes_of(pokes, "wait_for_other")
    assert len(made) >= 3 and set(made) == {1}, made  # every poke in try 1
    assert taken["end_date"] < sensor["end_date"]  # the slot was taken between two pokes
    result = sluice.run("tasks", "states", "sensing", sensing, "--json")
    assert '"state": "success"' in result
    with sluice._connect() as conn:
        stored = conn.exec_driver_sql(
            "SELECT result FROM task_instance WHERE task_id = 'wait_for_other'"
        ).scalar()
    assert stored is not None and str(stored).strip('"') == f"after {len(made)}"


def test_a_sensor_past_its_timeout_fails_or_skips_and_poke_mode_keeps_its_try(
    sluice: Sluice, tmp_path: Path
) -> None:
    pokes = tmp_path / "pokes.txt"
    (sluice.dags_folder / "sensors.py").write_text(
        textwrap.dedent(DAGS.format(pokes=str(pokes), other_done=str(tmp_path / "x")))
    )
    sluice.run("pools", "set", "one", "1")
    sluice.scheduler()
    sluice.worker(concurrency=2)
    run_id = sluice.trigger("timeouts")
    assert sluice.wait_run("timeouts", run_id, timeout=60) == "failed", sluice.logs()
    states = sluice.db_task_states("timeouts", run_id)
    never = states["never"]
    assert never["state"] == "failed" and never["try_number"] == 1, never  # no retry
    assert never["error"].startswith("SensorTimeout: sensor timed out after 1.5 s"), never
    assert states["never_soft"]["state"] == "skipped", states["never_soft"]
    assert states["in_poke_mode"]["state"] == "success", states["in_poke_mode"]
    assert pokes_of(pokes, "in_poke_mode") == [1, 1, 1]  # three pokes, one try
