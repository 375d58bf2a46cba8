"""The Python checks and their SQL twins agree on the same table states (real PostgreSQL).

The scheduler's passes decide room and trigger rules in Python (`queueing.Capacity`,
`tasks.trigger_rules.decide`); a worker's one-query results decide them in SQL
(`queue_ti_if_room` of decide.sql, `FITS_ITS_POOL_FIRST`, `OTHERS_SUCCEEDED`, the
fan-in's `unfinished`).
Each case below writes one table state and asks both.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from sluice.scheduler.core.db import transaction
from sluice.scheduler.core.models import Pool, TaskInstance
from sluice.scheduler.core.queries.tis import FITS_ITS_POOL_FIRST
from sluice.scheduler.core.states import TI, TI_UNFINISHED
from sluice.scheduler.decide.deps import upstream_counts
from sluice.scheduler.decide.downstream_sql import FAN_IN_COUNTING, OTHERS_SUCCEEDED
from sluice.scheduler.decide.plans import WAITS_FOR_ALL, Counted
from sluice.scheduler.decide.queueing import Capacity
from sluice.tasks.trigger_rules import TriggerRule, Verdict, decide
from tests.integration import test_worker_downstream
from tests.integration.test_worker_downstream import Harness
from tests.room_sql import queued_if_room

harness = test_worker_downstream.harness

ROOM = """
from sluice import DAG, task
with DAG("room", schedule=None, max_active_tasks=1000) as dag:
    for i in range(4):
        task(task_id=f"t{i}", pool="small")(lambda: i)
    task(task_id="candidate", pool="small")(lambda: 0)
"""

FAN_IN = """
from sluice import DAG, task
with DAG("fan_in", schedule=None) as dag:
    join = task(task_id="join")(lambda: 0)
    for i in range(3):
        task(task_id=f"u{i}")(lambda: i) >> join
    task(task_id="elsewhere")(lambda: 0)
"""


def set_states(session: Session, states: dict[str, TI], slots: dict[str, int]) -> None:
    for task_id, state in states.items():
        session.execute(
            update(TaskInstance)
            .where(TaskInstance.task_id == task_id)
            .values(state=state.value, pool_slots=slots.get(task_id, 1))
        )


@pytest.fixture
def room(harness: Harness) -> Iterator[Harness]:
    harness.add_pool("small", 1)
    harness.write("room", ROOM)
    harness.trigger("room")
    yield harness


def room_cases() -> Iterator[tuple[int, list[TI], list[int], int, int]]:
    """(pool slots, states of t0..t3, their slots, the candidate's slots, max_active)."""
    for total, active, two_slots, want, max_active in itertools.product(
        (1, 2, 3), range(4), (False, True), (1, 2), (1, 2, 5)
    ):
        states = [TI.RUNNING if i < active else TI.SUCCESS for i in range(4)]
        states[0] = TI.QUEUED if active else states[0]  # queued counts as running does
        yield total, states, [2 if two_slots and i == 0 else 1 for i in range(4)], want, max_active


def test_room_in_python_and_in_sql(room: Harness) -> None:
    checked = 0
    for total, states, slots, want, max_active in room_cases():
        with transaction(room.factory) as session:
            session.execute(update(Pool).where(Pool.name == "small").values(slots=total))
            set_states(
                session,
                {f"t{i}": s for i, s in enumerate(states)} | {"candidate": TI.NONE},
                {"t0": slots[0], "candidate": want},
            )
        with transaction(room.factory) as session:
            python = Capacity.locked(session).take("small", want, "room", max_active)
            candidate = session.scalars(
                select(TaskInstance.id).where(TaskInstance.task_id == "candidate")
            ).one()
            in_sql = queued_if_room(
                session,
                candidate,
                pool="small",
                slots=want,
                total=total,
                dag_id="room",
                max_active=max_active,
            )
            first = session.scalar(
                select(FITS_ITS_POOL_FIRST).where(TaskInstance.task_id == "candidate"),
                {"r_max_active": max_active},
            )
        case = (total, states, slots, want, max_active)
        assert in_sql is python, case
        assert bool(first) is python, case  # nobody waits in the pool here
        checked += 1
    assert checked == 144


FINISHED_OR_NOT = [TI.SUCCESS, TI.FAILED, TI.SKIPPED, TI.UPSTREAM_FAILED, TI.RUNNING, TI.NONE]


@pytest.mark.parametrize("counted", list(Counted))
def test_trigger_rules_in_python_and_in_sql(harness: Harness, counted: Counted) -> None:
    """u0 has just succeeded; u1 and u2 in every pair of states: the SQL twin of
    all_success says what `decide` says, and the fan-in's `unfinished` what the states
    say, and while one is unfinished a success changes no rule's verdict (what lets a
    fan-in's upstream skip the decision). A removed upstream is the one case where SQL
    and Python differ, on the safe side: SQL queues nothing, and the decision falls back
    to Python's."""
    harness.write("fan_in", FAN_IN)
    run_pk = harness.trigger("fan_in")
    names = ["u1", "u2"] if counted is Counted.OTHERS else ["elsewhere", "join", "u0"]
    for u1, u2 in itertools.product([*FINISHED_OR_NOT, TI.REMOVED], repeat=2):
        with transaction(harness.factory) as session:
            set_states(session, {"u0": TI.SUCCESS, "u1": u1, "u2": u2}, {})
        with harness.factory() as session:
            in_sql = session.scalar(
                select(OTHERS_SUCCEEDED[counted]), {"run_pk": run_pk, "fan_in": names}
            )
        python = decide(TriggerRule.ALL_SUCCESS, upstream_counts([TI.SUCCESS, u1, u2]))
        if TI.REMOVED in (u1, u2):
            assert not in_sql or python is Verdict.RUN, (u1, u2)
        else:
            assert bool(in_sql) is (python is Verdict.RUN), (u1, u2, python)
        with harness.factory() as session:
            unfinished = session.scalar(
                select(FAN_IN_COUNTING[counted][0]), {"run_pk": run_pk, "fan_in": names}
            )
        assert bool(unfinished) is any(s in TI_UNFINISHED for s in (u1, u2)), (u1, u2)
        if unfinished:  # what lets the fan-in path skip the decision while one is unfinished
            for rule in WAITS_FOR_ALL:
                before = decide(rule, upstream_counts([TI.NONE, u1, u2]))
                assert decide(rule, upstream_counts([TI.SUCCESS, u1, u2])) is before, (rule, u1, u2)
