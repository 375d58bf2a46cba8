"""Runs of other DAGs on real processes (issue 43, 3): `TriggerDagRun` creates a run of
another DAG through the triggerers (a retry creates no second one; waiting holds no
worker and fails on a failed run; a DAG that does not exist fails the task with its
line; until a triggerer makes the run, `tasks explain` says that one will), and
`ExternalTaskSensor` waits for another DAG's run of the same logical date (`reschedule`
mode: `up_for_reschedule` between pokes; `soft_fail` skips past the timeout).

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
import pathlib, time
import sluice
from sluice import DAG, task

GATE = pathlib.Path({gate!r})

with DAG("target_fails", schedule=None):
    @task
    def boom():
        raise RuntimeError("the target fails")

with DAG("waits_on_a_failure", schedule=None):
    sluice.TriggerDagRun(
        "start_b",
        trigger_dag_id="target_fails",
        wait_for_completion=True,
        retries=1,
        retry_delay=0,
    )

with DAG("target", schedule=None):
    @task
    def behind_the_gate(context):
        while not GATE.exists():
            time.sleep(0.1)
        return context["conf"]

with DAG("fires_and_forgets", schedule=None):
    sluice.TriggerDagRun("start_target", trigger_dag_id="target", conf={{"day": 7}})

with DAG("triggers_nothing", schedule=None):
    sluice.TriggerDagRun("start_ghost", trigger_dag_id="no_such_dag")

with DAG("upstream_a", schedule=None):
    @task
    def produce():
        return 1

with DAG("sensing", schedule=None):
    sluice.ExternalTaskSensor(
        "wait_a", external_dag_id="upstream_a", mode="reschedule", poke_interval=0.5,
        timeout=120,
    )

with DAG("sensing_softly", schedule=None):
    sluice.ExternalTaskSensor(
        "wait_never", external_dag_id="upstream_a", external_task_id="produce",
        mode="reschedule", poke_interval=0.5, timeout=2, soft_fail=True,
    )
"""

DAY = "2026-03-01T00:00:00+00:00"


def write_dags(sluice: Sluice, tmp_path: Path) -> Path:
    """The DAG file; the gate the `target` DAG waits on."""
    gate = tmp_path / "gate"
    (sluice.dags_folder / "other_runs.py").write_text(textwrap.dedent(DAGS.format(gate=str(gate))))
    return gate


@pytest.fixture
def gate(sluice: Sluice, tmp_path: Path) -> Path:
    """The DAG file written, the processes started; the gate the `target` DAG waits on."""
    gate = write_dags(sluice, tmp_path)
    sluice.scheduler()
    sluice.worker(concurrency=2)
    sluice.start("triggerer", "triggerer")
    return gate


def rows(sluice: Sluice, sql: str, **params: Any) -> list[Any]:
    from sqlalchemy import text

    with sluice._connect() as conn:
        return list(conn.execute(text(sql), params).all())


def runs_of(sluice: Sluice, dag_id: str) -> list[Any]:
    return rows(
        sluice,
        "SELECT run_id, run_type, state, conf FROM dag_run WHERE dag_id = :d ORDER BY id",
        d=dag_id,
    )


def ti_of(sluice: Sluice, dag_id: str, run_id: str, task_id: str) -> Any:
    found = rows(
        sluice,
        "SELECT state, try_number, error, result FROM task_instance "
        "WHERE dag_id = :d AND run_id = :r AND task_id = :t",
        d=dag_id,
        r=run_id,
        t=task_id,
    )
    return found[0]


@pytest.mark.timeout(120)
def test_waiting_on_a_failed_run_fails_and_a_retry_makes_no_second_run(
    sluice: Sluice, gate: Path
) -> None:
    run_id = sluice.trigger("waits_on_a_failure")
    assert sluice.wait_run("waits_on_a_failure", run_id, timeout=90) == "failed", sluice.logs()
    ti = ti_of(sluice, "waits_on_a_failure", run_id, "start_b")
    target = f"triggered__waits_on_a_failure__{run_id}__start_b"
    assert ti.state == "failed" and ti.try_number == 2, ti  # the retry ran, and failed too
    assert ti.error == f"TriggeredRunFailed: run target_fails.{target} ended failed"
    made = runs_of(sluice, "target_fails")
    assert [(r.run_id, r.run_type, r.state) for r in made] == [(target, "manual", "failed")]
    tries = rows(
        sluice,
        "SELECT t.state FROM task_try t JOIN task_instance ti ON ti.id = t.ti_id "
        "WHERE ti.dag_id = :d AND ti.task_id = 'start_b'",
        d="waits_on_a_failure",
    )
    assert [t.state for t in tries] == ["up_for_retry"]  # the first try, retried


@pytest.mark.timeout(120)
def test_without_waiting_the_task_succeeds_at_once_and_the_run_has_its_conf(
    sluice: Sluice, gate: Path
) -> None:
    run_id = sluice.trigger("fires_and_forgets")
    assert sluice.wait_run("fires_and_forgets", run_id, timeout=60) == "success", sluice.logs()
    made = runs_of(sluice, "target")
    target = f"triggered__fires_and_forgets__{run_id}__start_target"
    assert [(r.run_id, r.run_type, r.conf) for r in made] == [(target, "manual", {"day": 7})]
    assert made[0].state in ("queued", "running")  # behind its gate: not waited for
    ti = ti_of(sluice, "fires_and_forgets", run_id, "start_target")
    assert json.loads(ti.result) == {"dag_id": "target", "run_id": target}
    gate.touch()
    assert sluice.wait_run("target", target, timeout=60) == "success", sluice.logs()
    assert json.loads(ti_of(sluice, "target", target, "behind_the_gate").result) == {"day": 7}


@pytest.mark.timeout(120)
def test_the_run_is_made_by_a_triggerer_and_explain_says_so_meanwhile(
    sluice: Sluice, tmp_path: Path
) -> None:
    """No triggerer yet: the task waits deferred, holding no worker, and no run of the
    target is made; `tasks explain` says who makes it. A triggerer started then makes it."""
    write_dags(sluice, tmp_path)
    sluice.scheduler()
    sluice.worker(concurrency=2)
    run_id = sluice.trigger("fires_and_forgets")
    wait_until(
        lambda: ti_of(sluice, "fires_and_forgets", run_id, "start_target").state == "deferred",
        timeout=60,
    )
    assert runs_of(sluice, "target") == []
    explained = " ".join(
        sluice.run("tasks", "explain", "fires_and_forgets", run_id, "start_target").split()
    )
    assert "waits on its trigger sluice.tasks.triggers.CreateRun(" in explained, explained
    assert "a triggerer creates that run and resumes it" in explained, explained
    sluice.start("triggerer", "triggerer")
    assert sluice.wait_run("fires_and_forgets", run_id, timeout=60) == "success", sluice.logs()
    assert [r.run_id for r in runs_of(sluice, "target")] == [
        f"triggered__fires_and_forgets__{run_id}__start_target"
    ]


@pytest.mark.timeout(120)
def test_a_target_dag_that_does_not_exist_fails_the_task_with_its_line(
    sluice: Sluice, gate: Path
) -> None:
    run_id = sluice.trigger("triggers_nothing")
    assert sluice.wait_run("triggers_nothing", run_id, timeout=60) == "failed", sluice.logs()
    ti = ti_of(sluice, "triggers_nothing", run_id, "start_ghost")
    assert ti.error == "cannot trigger a run of DAG 'no_such_dag': no such DAG", ti
    log = sluice.run("tasks", "logs", "triggers_nothing", run_id, "start_ghost")
    assert "cannot trigger a run of DAG 'no_such_dag': no such DAG" in log


@pytest.mark.timeout(120)
def test_a_reschedule_sensor_succeeds_once_the_other_dags_run_of_its_date_does(
    sluice: Sluice, gate: Path
) -> None:
    run_id = sluice.trigger("sensing", "--logical-date", DAY)
    wait_until(
        lambda: ti_of(sluice, "sensing", run_id, "wait_a").state == "up_for_reschedule",
        timeout=60,
    )
    other = sluice.trigger("upstream_a", "--logical-date", "2026-03-02T00:00:00+00:00")
    assert sluice.wait_run("upstream_a", other, timeout=60) == "success"
    assert sluice.db_run_state("sensing", run_id) == "running"  # another date: not it
    same = sluice.trigger("upstream_a", "--logical-date", DAY)
    assert sluice.wait_run("upstream_a", same, timeout=60) == "success", sluice.logs()
    assert sluice.wait_run("sensing", run_id, timeout=60) == "success", sluice.logs()
    ti = ti_of(sluice, "sensing", run_id, "wait_a")
    assert ti.state == "success" and ti.try_number == 1, ti  # pokes are no new tries


@pytest.mark.timeout(120)
def test_a_soft_fail_sensor_past_its_timeout_is_skipped(sluice: Sluice, gate: Path) -> None:
    run_id = sluice.trigger("sensing_softly", "--logical-date", DAY)
    assert sluice.wait_run("sensing_softly", run_id, timeout=60) == "success", sluice.logs()
    ti = ti_of(sluice, "sensing_softly", run_id, "wait_never")
    assert ti.state == "skipped", ti
