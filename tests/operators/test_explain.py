"""`explain_ti`: one test per reason, states built in a real PostgreSQL database.

States are reached through the application's functions (tests/operators/helpers.py);
the explanation is read with a fixed `now`, so nothing here depends on timing.
"""

from __future__ import annotations

import datetime as dt
import json

import pytest

from sluice.scheduler.control.explain import LEADS, ExplainError, ReasonKind
from sluice.scheduler.control.explain_reasons import WAITING_REASONS
from sluice.scheduler.core.states import TI, TI_WAITING
from tests.operators.helpers import World

K = ReasonKind

CHAIN = """
with DAG("chain", schedule=None) as dag:
    a = task(task_id="a")(lambda: None)
    b = task(task_id="b", retries=2)(lambda: None)
    c = task(task_id="c", trigger_rule=TriggerRule.ALL_DONE)(lambda: None)
    a >> b >> c
"""


@pytest.fixture
def world(pg_url, tmp_path):
    folder = tmp_path / "dags"
    folder.mkdir()
    w = World(pg_url, folder)
    yield w
    w.close()


@pytest.fixture
def chain(world: World) -> World:
    world.dags(CHAIN)
    world.scheduler_job()
    world.trigger("chain", "r1")
    return world


def test_waiting_on_upstream_names_it_and_the_rule(chain: World) -> None:
    # Given a running upstream
    chain.advance("chain", "r1", "a", TI.RUNNING)
    # When b is explained
    e = chain.explain("chain", "r1", "b")
    # Then it waits on a (running), and all_success waits
    assert e.state == "none"
    upstream = e.reason(K.UPSTREAM)
    assert upstream is not None and upstream.blocking
    assert upstream.data["waiting_on"] == ["a"]
    assert upstream.data["upstream"] == [{"task_id": "a", "state": "running"}]
    rule = e.reason(K.TRIGGER_RULE)
    assert rule is not None
    assert rule.data["trigger_rule"] == "all_success"
    assert rule.data["verdict"] == "wait"
    assert rule.data["next_state"] is None
    assert "'a' (running)" in e.summary


def test_rule_met_says_the_next_decision_schedules_it(chain: World) -> None:
    chain.advance("chain", "r1", "a", TI.SUCCESS)
    e = chain.explain("chain", "r1", "b")
    rule = e.reason(K.TRIGGER_RULE)
    assert rule is not None
    assert (rule.data["verdict"], rule.data["next_state"]) == ("run", "scheduled")
    assert e.reason(K.NO_SCHEDULER) is None  # a scheduler job is alive


def test_upstream_failed_names_the_rule_that_decided(chain: World) -> None:
    chain.advance("chain", "r1", "a", TI.FAILED, error="ValueError: boom")
    chain.decide("chain", "r1")
    e = chain.explain("chain", "r1", "b")
    assert e.state == "upstream_failed"
    rule = e.reason(K.TRIGGER_RULE)
    assert rule is not None and rule.blocking
    assert (rule.data["trigger_rule"], rule.data["verdict"]) == ("all_success", "upstream_failed")
    assert rule.data["upstream"] == [{"task_id": "a", "state": "failed"}]
    assert "decided upstream_failed" in e.summary
    # c (all_done) runs once b is done, whatever b's end: the same decision scheduled it.
    c = chain.explain("chain", "r1", "c")
    assert (c.state, c.kinds()) == ("scheduled", [K.READY])


def test_an_early_decision_is_reported_as_made_from_the_states_then(world: World) -> None:
    world.dags(
        """
    with DAG("early", schedule=None) as dag:
        a1 = task(task_id="a1")(lambda: None)
        a2 = task(task_id="a2")(lambda: None)
        b = task(task_id="b")(lambda: None)
        [a1, a2] >> b
    """
    )
    world.trigger("early", "r1")
    world.advance("early", "r1", "a1", TI.SKIPPED)
    world.decide("early", "r1")  # all_success: skipped at the first skipped upstream
    world.advance("early", "r1", "a2", TI.FAILED)
    e = world.explain("early", "r1", "b")
    assert e.state == "skipped"
    rule = e.reason(K.TRIGGER_RULE)
    assert rule is not None and rule.blocking
    assert rule.data["verdict"] == "upstream_failed"  # what the rule gives with the states now
    assert "decided skipped from the upstream states at the time" in rule.detail


def test_branch_that_did_not_choose_it(world: World) -> None:
    world.dags(
        """
    with DAG("branchy", schedule=None) as dag:
        @task.branch
        def pick():
            return "left"
        left = task(task_id="left")(lambda: None)
        right = task(task_id="right")(lambda: None)
        pick >> [left, right]
    """
    )
    world.scheduler_job()
    world.trigger("branchy", "r1")
    world.advance("branchy", "r1", "pick", TI.SUCCESS, result=json.dumps("left"))
    world.decide("branchy", "r1")
    e = world.explain("branchy", "r1", "right")
    assert e.state == "skipped"
    branch = e.reason(K.BRANCH_NOT_CHOSEN)
    assert branch is not None and branch.blocking
    assert branch.data == {"branch_task": "pick", "chosen": ["left"]}
    assert "branch task 'pick' chose 'left'" in e.summary
    rule = e.reason(K.TRIGGER_RULE)
    assert rule is not None and not rule.blocking and rule.data["verdict"] == "run"
    assert world.explain("branchy", "r1", "left").state == "scheduled"


POOLED = """
with DAG("pooled", schedule=None) as dag:
    task(task_id="x", pool="small")(lambda: None)
    task(task_id="y", pool="small")(lambda: None)
    task(task_id="big", pool="small", pool_slots=5)(lambda: None)
    task(task_id="lost", pool="nope")(lambda: None)
"""


def test_pool_full_names_what_occupies_it(world: World) -> None:
    world.pool("small", 1)
    world.dags(POOLED)
    world.scheduler_job()
    world.trigger("pooled", "r1")
    world.advance("pooled", "r1", "x", TI.RUNNING)
    world.advance("pooled", "r1", "y", TI.SCHEDULED)
    e = world.explain("pooled", "r1", "y")
    assert e.state == "scheduled"
    full = e.reason(K.POOL_FULL)
    assert full is not None and full.blocking
    assert (full.data["pool"], full.data["slots"], full.data["used"]) == ("small", 1, 1)
    assert full.data["occupied_by"] == [
        {"dag_id": "pooled", "run_id": "r1", "task_id": "x", "state": "running", "pool_slots": 1}
    ]
    assert "pool 'small' is full" in e.summary and "pooled/r1/x" in e.summary
    assert e.reason(K.READY) is None


def test_pool_missing_and_pool_too_small(world: World) -> None:
    world.pool("small", 1)
    world.dags(POOLED)
    world.scheduler_job()
    world.trigger("pooled", "r1")
    world.advance("pooled", "r1", "lost", TI.SCHEDULED)
    world.advance("pooled", "r1", "big", TI.SCHEDULED)
    assert world.explain("pooled", "r1", "lost").kinds()[0] == K.POOL_MISSING
    big = world.explain("pooled", "r1", "big").reason(K.POOL_TOO_SMALL)
    assert big is not None and (big.data["slots"], big.data["pool_slots"]) == (1, 5)


def test_max_active_tasks_names_what_occupies_it(world: World) -> None:
    world.dags(
        """
    with DAG("narrow", schedule=None, max_active_tasks=1) as dag:
        task(task_id="x")(lambda: None)
        task(task_id="y")(lambda: None)
    """
    )
    world.scheduler_job()
    world.trigger("narrow", "r1")
    world.advance("narrow", "r1", "x", TI.QUEUED)
    world.advance("narrow", "r1", "y", TI.SCHEDULED)
    e = world.explain("narrow", "r1", "y")
    limit = e.reason(K.MAX_ACTIVE_TASKS)
    assert limit is not None and limit.blocking
    assert (limit.data["max_active_tasks"], limit.data["active"]) == (1, 1)
    assert [o["task_id"] for o in limit.data["occupied_by"]] == ["x"]
    assert e.reason(K.POOL_FULL) is None


def test_nothing_holds_a_scheduled_ti_but_no_scheduler_runs(world: World) -> None:
    world.dags(CHAIN)
    world.trigger("chain", "r1")
    world.advance("chain", "r1", "a", TI.SCHEDULED)
    e = world.explain("chain", "r1", "a")
    assert e.kinds()[:2] == [K.READY, K.NO_SCHEDULER]
    world.scheduler_job()
    assert world.explain("chain", "r1", "a").kinds() == [K.READY]


def test_max_active_runs_keeps_the_run_queued(world: World) -> None:
    world.dags(
        """
    with DAG("serial", schedule=None, max_active_runs=1) as dag:
        task(task_id="t")(lambda: None)
    """
    )
    world.scheduler_job()
    world.trigger("serial", "first")
    world.trigger("serial", "second", start=False)
    e = world.explain("serial", "second", "t")
    assert e.run_state == "queued"
    assert e.kinds()[:2] == [K.RUN_NOT_RUNNING, K.MAX_ACTIVE_RUNS]
    held = e.reason(K.MAX_ACTIVE_RUNS)
    assert held is not None
    assert held.data["running_runs"] == ["first"]
    assert held.data["max_active_runs"] == 1
    assert e.reason(K.DAG_PAUSED) is None


def test_paused_dag_keeps_a_new_run_queued(world: World) -> None:
    from sluice.scheduler.core.db import transaction
    from sluice.scheduler.core.models import Dag

    world.dags(CHAIN)
    world.scheduler_job()
    with transaction(world.factory) as session:
        dag = session.get(Dag, "chain")
        assert dag is not None
        dag.is_paused = True
    world.trigger("chain", "r1", start=False)
    e = world.explain("chain", "r1", "a")
    assert e.kinds()[:2] == [K.RUN_NOT_RUNNING, K.DAG_PAUSED]
    assert "paused" in e.summary


def test_run_not_running_after_it_finished(chain: World) -> None:
    from sluice.scheduler.core.db import transaction
    from sluice.scheduler.core.models import DagRun
    from sluice.scheduler.core.states import DagRunState
    from sluice.scheduler.core.transitions import move_run

    with transaction(chain.factory) as session:
        run_pk = session.query(DagRun.id).filter(DagRun.run_id == "r1").scalar()
        move_run(session, run_pk, DagRunState.FAILED, expect=[DagRunState.RUNNING], now=chain.now)
    e = chain.explain("chain", "r1", "a")
    stopped = e.reason(K.RUN_NOT_RUNNING)
    assert stopped is not None and stopped.data["run_state"] == "failed"
    assert e.summary.startswith("Not scheduled yet: its run 'r1' is failed")


def test_queued_names_the_celery_queue_and_whether_a_worker_serves_it(chain: World) -> None:
    queued_at = chain.now - dt.timedelta(seconds=90)
    chain.advance("chain", "r1", "a", TI.QUEUED, at=queued_at)
    nobody = chain.explain("chain", "r1", "a", workers={"other": ["w9"]})
    queued = nobody.reason(K.QUEUED)
    assert queued is not None
    assert queued.data["celery_queue"] == "sluice.default"
    assert queued.data["waiting_seconds"] == 90
    assert queued.data["served"] is False
    assert "publishes it again" in queued.detail  # past the 60 s queued timeout
    no_worker = nobody.reason(K.NO_WORKER)
    assert no_worker is not None and no_worker.blocking
    assert no_worker.data["queues_served"] == ["other"]

    served = chain.explain("chain", "r1", "a", workers={"default": ["w1", "w2"]})
    assert served.reason(K.NO_WORKER) is None
    reason = served.reason(K.QUEUED)
    assert reason is not None and reason.data["workers"] == ["w1", "w2"]

    unasked = chain.explain("chain", "r1", "a")
    assert unasked.reason(K.NO_WORKER) is None
    assert "not asked" in unasked.notes[0]


def test_retry_due_later_and_due_now(chain: World) -> None:
    due = chain.now + dt.timedelta(seconds=30)
    chain.advance("chain", "r1", "a", TI.SUCCESS)
    chain.advance("chain", "r1", "b", TI.UP_FOR_RETRY, next_retry_at=due, error="OSError: disk")
    later = chain.explain("chain", "r1", "b").reason(K.RETRY)
    assert later is not None
    assert later.data["next_retry_at"] == due.isoformat()
    assert (later.data["due"], later.data["due_in_seconds"]) == (False, 30)
    assert (later.data["try_number"], later.data["max_tries"]) == (1, 3)
    assert "OSError: disk" in later.detail and "in 30s" in later.detail
    now_due = chain.explain("chain", "r1", "b", at=due + dt.timedelta(seconds=1))
    retry = now_due.reason(K.RETRY)
    assert retry is not None and retry.data["due"] is True


def test_a_sensor_between_pokes_says_when_it_pokes_again(chain: World) -> None:
    # Given a reschedule-mode sensor whose poke found nothing: its next poke in 30 s
    due = chain.now + dt.timedelta(seconds=30)
    chain.advance("chain", "r1", "a", TI.SUCCESS)
    chain.advance("chain", "r1", "b", TI.UP_FOR_RESCHEDULE, next_retry_at=due)
    # When it is explained before its next poke is due
    e = chain.explain("chain", "r1", "b")
    # Then it waits for its time, within its try; not for a worker (none was asked)
    assert e.state == "up_for_reschedule" and e.kinds() == [K.RESCHEDULE]
    poke = e.reason(K.RESCHEDULE)
    assert poke is not None and poke.blocking
    assert poke.data["next_poke_at"] == due.isoformat()
    assert (poke.data["due"], poke.data["due_in_seconds"]) == (False, 30)
    assert (poke.data["try_number"], poke.data["max_tries"]) == (1, 3)
    assert e.summary.startswith("Waiting for its next poke: the sensor's try 1 of 3")
    assert e.summary.endswith(f"due at {due:%Y-%m-%d %H:%M:%S} UTC, in 30s.")
    assert not any("workers were not asked" in n for n in e.notes)
    # ... and once it is due, a scheduler's next decision schedules it and queues it
    now_due = chain.explain("chain", "r1", "b", at=due + dt.timedelta(seconds=1))
    poked = now_due.reason(K.RESCHEDULE)
    assert poked is not None and poked.data["due"] is True
    assert poked.detail.endswith(
        "the next scheduler decision schedules it and a scheduler queues it"
    )


def test_a_sensor_between_pokes_is_said_by_what_its_worker_kept(chain: World) -> None:
    # Given a sensor's TI as a worker leaves it between pokes: its try and its empty pokes
    # kept in `waiting` (its try number one less: its next queueing adds the 1 back)
    first = chain.now - dt.timedelta(minutes=2)
    kept = {"try": 1, "since": first.isoformat(), "pokes": 3}
    due = chain.now + dt.timedelta(seconds=40)
    chain.advance(
        "chain", "r1", "a", TI.UP_FOR_RESCHEDULE, next_retry_at=due, try_number=0, waiting=kept
    )
    # When it is explained, then it is said in its try, with its pokes since the first
    poke = chain.explain("chain", "r1", "a").reason(K.RESCHEDULE)
    assert poke is not None
    assert (poke.data["try_number"], poke.data["pokes"]) == (1, 3)
    assert poke.data["first_poke_at"] == first.isoformat()
    assert "try 1 of 1 found its condition not met at its last poke (3 empty pokes" in poke.detail


def test_each_waiting_state_has_its_reason_and_lead() -> None:
    assert set(WAITING_REASONS) == TI_WAITING
    assert set(LEADS) >= TI_WAITING


def test_removed_task(chain: World) -> None:
    chain.dags(
        """
    with DAG("chain", schedule=None) as dag:
        a = task(task_id="a")(lambda: None)
        b = task(task_id="b", retries=2)(lambda: None)
        a >> b
    """,
        name="dags",
    )
    pending = chain.explain("chain", "r1", "c")
    assert pending.kinds()[0] == K.REMOVED and "marks it removed" in pending.summary
    chain.decide("chain", "r1")  # verify_integrity runs: c becomes removed
    e = chain.explain("chain", "r1", "c")
    assert e.state == "removed"
    removed = e.reason(K.REMOVED)
    assert removed is not None and removed.data["in_dag_now"] is False


def test_finished_states_with_error_line_and_tries(chain: World) -> None:
    chain.advance("chain", "r1", "a", TI.SUCCESS)
    ok = chain.explain("chain", "r1", "a")
    done = ok.reason(K.FINISHED)
    assert done is not None and (done.data["try_number"], done.data["max_tries"]) == (1, 1)
    assert ok.summary.startswith("Succeeded: try 1 of 1 succeeded on worker-host")

    chain.advance("chain", "r1", "b", TI.FAILED, error="ValueError: boom")
    failed = chain.explain("chain", "r1", "b")
    reason = failed.reason(K.FINISHED)
    assert reason is not None and reason.data["error"] == "ValueError: boom"
    assert failed.summary == "Failed: try 1 of 3 failed on worker-host in 0s: ValueError: boom."


def test_skipped_itself_and_running_with_stale_heartbeat(chain: World) -> None:
    chain.advance("chain", "r1", "a", TI.SKIPPED)
    assert chain.explain("chain", "r1", "a").kinds() == [K.SKIPPED_ITSELF]

    chain.trigger("chain", "r2")
    chain.advance("chain", "r2", "a", TI.RUNNING, at=chain.now - dt.timedelta(seconds=100))
    e = chain.explain("chain", "r2", "a")
    running = e.reason(K.RUNNING)
    assert running is not None and running.data["hostname"] == "worker-host"
    stopped = e.reason(K.HEARTBEAT_STOPPED)
    assert stopped is not None and stopped.data["then"] == "failed"


def test_unknown_task_run_or_dag(chain: World) -> None:
    for args in (("chain", "r1", "zzz"), ("chain", "nope", "a"), ("nope", "r1", "a")):
        with pytest.raises(ExplainError):
            chain.explain(*args)


def test_to_dict_is_json(chain: World) -> None:
    chain.advance("chain", "r1", "a", TI.RUNNING)
    body = json.loads(json.dumps(chain.explain("chain", "r1", "b").to_dict()))
    assert body["state"] == "none"
    assert {r["kind"] for r in body["reasons"]} >= {"upstream", "trigger_rule"}
    assert all(isinstance(r["detail"], str) and r["detail"] for r in body["reasons"])


def test_text_rendering_marks_blocking_reasons(chain: World) -> None:
    import io

    from rich.console import Console

    from sluice.scheduler.cli.explain_cmd import print_explanation

    chain.advance("chain", "r1", "a", TI.RUNNING)
    out = io.StringIO()
    print_explanation(chain.explain("chain", "r1", "b", workers={}), Console(file=out, width=200))
    lines = out.getvalue().splitlines()
    assert lines[0] == (
        "chain / r1 / b: none (try 0 of 3, queue default, pool default_pool; run running)"
    )
    assert lines[1].startswith("Not scheduled yet: waiting on upstream 'a' (running)")
    assert lines[2] == "  ● upstream: waiting on upstream 'a' (running)"
    assert lines[-1].startswith("  ○ no_worker: no worker serves queue 'default'")
