"""The decision core's Python and SQL twins agree on random table states (hypothesis,
real PostgreSQL).

The scheduler's passes decide room and readiness in Python (`queueing.Capacity`,
`tasks.trigger_rules.decide` over `deps.upstream_counts`); a worker's one-query results
decide them in SQL (`HAS_ROOM`, `FITS_ITS_POOL_FIRST`, `NEXT_WAITING_FITS`,
`OTHERS_SUCCEEDED`, the fan-in's and the leaf's `unfinished`, the chain's and fan-out's
readiness). `test_sql_parity.py` ties them on two hand-made enumerations; here
hypothesis draws the table states:

1. room: random pools, TIs of two DAGs in every state, slots, priorities and ages, a
   random candidate and DAG limits: `Capacity.take` is `HAS_ROOM`, and
   `FITS_ITS_POOL_FIRST` when nobody waits in the pool (never when someone does); the
   first TI waiting in a pool is queued by the fill (`NEXT_WAITING_FITS`) exactly when
   `Capacity.take` takes it;
2. trigger rules: every rule the SQL side has a twin for, over 1-6 upstreams in every
   state (removed included).

One database per test; each example rewrites the rows it reads (no database per example).
`derandomize=True`: the same examples on every run.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session, sessionmaker

from sluice import DAG, task
from sluice.scheduler.core.db import make_engine, make_session_factory, transaction, utcnow
from sluice.scheduler.core.models import Dag, DagRun, Pool, TaskInstance
from sluice.scheduler.core.queries.tis import FITS_ITS_POOL_FIRST, HAS_ROOM, NEXT_WAITING_FITS
from sluice.scheduler.core.states import TI, TI_TERMINAL, TI_UNFINISHED, DagRunState, RunType
from sluice.scheduler.decide.decisions import TiView
from sluice.scheduler.decide.deps import run_outcome, upstream_counts
from sluice.scheduler.decide.downstream_sql import (
    FAN_IN_COUNTING,
    FAN_OUT_READY,
    JOIN_READY,
    LEAF_COUNTING,
    OTHERS_SUCCEEDED,
)
from sluice.scheduler.decide.plans import WAITS_FOR_ALL, Counted
from sluice.scheduler.decide.queueing import Capacity
from sluice.scheduler.scheduling.dagrun import create_dagrun
from sluice.tasks.serialize import serialize_dag, version_hash
from sluice.tasks.trigger_rules import TriggerRule, Verdict, decide

TWINS = settings(
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
"""Every property's settings: reproducible (the same examples on every run), no deadline
(an example is a few queries), the database fixtures shared by the examples."""
POOLS = ("p0", "p1", "p2")
BASE = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
"""The time TIs drawn `scheduled` were scheduled at (less their drawn age)."""


@pytest.fixture
def db(pg_url: str) -> Iterator[sessionmaker[Session]]:
    engine = make_engine(pg_url)
    factory = make_session_factory(engine)
    with transaction(factory) as session:
        session.add_all(Pool(name=name, slots=1) for name in POOLS)
    yield factory
    engine.dispose()


def store(factory: sessionmaker[Session], dag: DAG) -> int:
    """`dag` stored as a folder sync stores it (serialized, its version hash), its runs
    deleted, and one running run no job claimed created from it; that run's pk."""
    spec = serialize_dag(dag)
    with transaction(factory) as session:
        row = session.get(Dag, dag.dag_id)
        if row is None:
            row = Dag(dag_id=dag.dag_id, fileloc=spec["fileloc"], is_paused=False)
            session.add(row)
        row.serialized = spec
        row.version_hash = version_hash(spec)
        row.max_active_tasks = dag.max_active_tasks
        row.max_active_runs = dag.max_active_runs
        session.flush()
        session.execute(delete(DagRun).where(DagRun.dag_id == dag.dag_id))
        now = utcnow()
        run = create_dagrun(session, row, run_type=RunType.MANUAL, logical_date=now, now=now)
        session.execute(
            update(DagRun).where(DagRun.id == run.id).values(state=DagRunState.RUNNING.value)
        )
        return run.id


def ti_ids(factory: sessionmaker[Session], run_pk: int) -> dict[str, int]:
    with factory() as session:
        rows = session.execute(
            select(TaskInstance.task_id, TaskInstance.id).where(TaskInstance.dag_run_id == run_pk)
        ).all()
    return {task_id: ti_id for task_id, ti_id in rows}


def noop() -> None:
    return None


# 1. Room ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Drawn:
    """A TI as drawn: its state, pool, slots, priority and age (seconds before BASE it
    was scheduled)."""

    state: TI
    pool: str
    slots: int
    priority: int
    age: int

    def write(self, session: Session, ti_id: int) -> None:
        session.execute(
            update(TaskInstance)
            .where(TaskInstance.id == ti_id)
            .values(
                state=self.state.value,
                pool=self.pool,
                pool_slots=self.slots,
                priority_weight=self.priority,
                scheduled_at=BASE - dt.timedelta(seconds=self.age),
            )
        )


room_states = st.one_of(
    st.sampled_from(list(TI)), st.sampled_from([TI.SCHEDULED, TI.QUEUED, TI.RUNNING])
)
"""Every TI state, those that hold or wait for room more often."""
drawn_tis = st.builds(
    Drawn,
    room_states,
    st.sampled_from(POOLS),
    st.integers(1, 3),
    st.integers(1, 3),
    st.integers(0, 3),
)
ROOM_DAGS = ("room_a", "room_b")
ROOM_TIS = 6
"""TIs per DAG whose states are drawn (those not drawn are `removed`: nowhere)."""


@dataclass(frozen=True)
class RoomCase:
    slots: tuple[int, ...]
    """Of each of POOLS."""
    tis: tuple[tuple[Drawn, ...], tuple[Drawn, ...]]
    """Of room_a (the candidate's DAG) and room_b: 0 to ROOM_TIS each."""
    max_active: tuple[int, int]
    """max_active_tasks of room_a and room_b."""
    pool: str
    """The candidate's pool and slots."""
    want: int


room_cases = st.builds(
    RoomCase,
    st.tuples(*[st.integers(1, 4)] * len(POOLS)),
    st.tuples(*[st.lists(drawn_tis, max_size=ROOM_TIS).map(tuple)] * 2),
    st.tuples(st.integers(1, 5), st.integers(1, 5)),
    st.sampled_from(POOLS),
    st.integers(1, 3),
)


@dataclass(frozen=True)
class RoomRows:
    """The rows the room cases rewrite: each DAG's TIs (by DAG), the candidate's id."""

    tis: dict[str, list[int]]
    candidate: int


@pytest.fixture
def room_rows(db: sessionmaker[Session]) -> RoomRows:
    tis: dict[str, list[int]] = {}
    candidate = 0
    for dag_id in ROOM_DAGS:
        with DAG(dag_id, schedule=None) as dag:
            for i in range(ROOM_TIS):
                task(task_id=f"t{i}")(noop)
            if dag_id == "room_a":
                task(task_id="candidate")(noop)
        ids = ti_ids(db, store(db, dag))
        tis[dag_id] = [ids[f"t{i}"] for i in range(ROOM_TIS)]
        candidate = ids.get("candidate", candidate)
    return RoomRows(tis, candidate)


def write_room(session: Session, rows: RoomRows, case: RoomCase) -> list[tuple[str, int, Drawn]]:
    """The case's pools, limits and TIs written; the drawn TIs as (DAG, id, drawn)."""
    for name, slots in zip(POOLS, case.slots, strict=True):
        session.execute(update(Pool).where(Pool.name == name).values(slots=slots))
    written: list[tuple[str, int, Drawn]] = []
    for dag_id, drawn, max_active in zip(ROOM_DAGS, case.tis, case.max_active, strict=True):
        session.execute(update(Dag).where(Dag.dag_id == dag_id).values(max_active_tasks=max_active))
        for i, ti_id in enumerate(rows.tis[dag_id]):
            ti = drawn[i] if i < len(drawn) else Drawn(TI.REMOVED, POOLS[0], 1, 1, 0)
            ti.write(session, ti_id)
            written.append((dag_id, ti_id, ti))
    Drawn(TI.NONE, case.pool, case.want, 1, 0).write(session, rows.candidate)
    return written


@settings(TWINS, max_examples=150)
@given(case=room_cases)
def test_room_in_python_and_in_sql(
    db: sessionmaker[Session], room_rows: RoomRows, case: RoomCase
) -> None:
    """Generalises test_sql_parity's 144 room cases: pools of 1-4 slots, TIs of two DAGs
    in every state in any pool, with 1-3 slots, priorities and ages; the candidate's
    verdict, and the fill's choice of the first TI waiting in its pool."""
    with transaction(db) as session:
        written = write_room(session, room_rows, case)
    max_active = dict(zip(ROOM_DAGS, case.max_active, strict=True))
    total = dict(zip(POOLS, case.slots, strict=True))[case.pool]
    with transaction(db) as session:
        python = Capacity.locked(session).take(case.pool, case.want, "room_a", max_active["room_a"])
        params: dict[str, Any] = {
            "r_pool": case.pool,
            "r_slots": case.want,
            "r_pool_total": total,
            "r_dag": "room_a",
            "r_max_active": max_active["room_a"],
        }
        in_sql = session.scalar(select(HAS_ROOM), params)
        first = session.scalar(
            select(FITS_ITS_POOL_FIRST).where(TaskInstance.id == room_rows.candidate),
            {"r_max_active": max_active["room_a"]},
        )
        waiting = [
            (-ti.priority, -ti.age, ti_id, dag_id, ti)
            for dag_id, ti_id, ti in written
            if ti.state is TI.SCHEDULED and ti.pool == case.pool
        ]
        expected_fill = None
        if waiting:
            *_, ti_id, dag_id, ti = min(waiting)
            fits = Capacity.locked(session).take(ti.pool, ti.slots, dag_id, max_active[dag_id])
            expected_fill = ti_id if fits else None
        filled = session.scalar(
            select(TaskInstance.id).where(NEXT_WAITING_FITS),
            {"r_pool": case.pool, "r_pool_total": total},
        )
    assert bool(in_sql) is python
    assert bool(first) is (python and not waiting)  # those waiting in the pool come first
    assert filled == expected_fill


# 2. Trigger rules ---------------------------------------------------------------------

UPSTREAMS = 6
RULE_TASKS = (
    *(f"u{i}" for i in range(1, UPSTREAMS)),
    "e0",
    "e1",
    "join",
    "solo",
    "next",
)
"""The TIs whose states are drawn: all but u0, the upstream whose success is written."""
RUN_ON_ONE_SUCCESS = tuple(
    rule for rule in TriggerRule if decide(rule, upstream_counts([TI.SUCCESS])) is Verdict.RUN
)
"""The rules of a chain's or fan-out's downstream (`plans._run_on_success`): their SQL
twin is their only upstream's success (`FAN_OUT_READY`, `_CHAIN_NEXT`)."""


@dataclass(frozen=True)
class RulesCase:
    upstreams: int
    """How many of u0..u5 the fan-in counts (u0, the finished one, among them)."""
    states: tuple[TI, ...]
    """Of RULE_TASKS: the first upstreams - 1 are the fan-in's other upstreams."""
    counted: Counted


finished_more = st.one_of(
    st.sampled_from(list(TI)), st.sampled_from(sorted(TI_TERMINAL)), st.just(TI.SUCCESS)
)
"""Every TI state, finished ones (success the most) more often: else a whole fan-in
succeeded, or a whole run finished, would be rare."""
rules_cases = st.builds(
    RulesCase,
    st.integers(1, UPSTREAMS),
    st.tuples(*[finished_more] * len(RULE_TASKS)),
    st.sampled_from(list(Counted)),
)


@dataclass(frozen=True)
class RulesRun:
    run_pk: int
    ids: dict[str, int]
    spec: dict[str, Any]
    dag_hash: str


@pytest.fixture
def rules_run(db: sessionmaker[Session]) -> RulesRun:
    with DAG("rules", schedule=None) as dag:
        join = task(task_id="join")(noop)
        for i in range(UPSTREAMS):
            task(task_id=f"u{i}")(noop) >> join
        task(task_id="e0")(noop)
        task(task_id="e1")(noop)
        task(task_id="solo")(noop) >> task(task_id="next")(noop)
    run_pk = store(db, dag)
    spec = serialize_dag(dag)
    return RulesRun(run_pk, ti_ids(db, run_pk), spec, version_hash(spec))


@settings(TWINS, max_examples=300)
@given(case=rules_cases)
def test_trigger_rules_in_python_and_in_sql(
    db: sessionmaker[Session], rules_run: RulesRun, case: RulesCase
) -> None:
    """u0 has just succeeded; 0-5 other upstreams of the fan-in and every other TI of the
    run in random states (removed included). Every SQL twin says what Python says:
    - all_success (`OTHERS_SUCCEEDED`, and `JOIN_READY`, the statement that uses it) is
      `decide`'s run, but on the documented safe side: with a removed upstream SQL says
      not ready (queues nothing) and the decision falls back to Python's;
    - the fan-in's `unfinished` is whether another upstream is unfinished, and while one
      is, the success changes no verdict of any rule that waits for all (WAITS_FOR_ALL):
      what lets its result skip the decision;
    - a chain's or fan-out's downstream ready (`FAN_OUT_READY`) only when `decide` runs
      it on its one upstream's state, for every rule such a downstream may have, and
      whenever that upstream succeeded;
    - a leaf's `unfinished` (another TI of the run is) is `run_outcome`'s "not over"."""
    states = dict(zip(RULE_TASKS, case.states, strict=True))
    ids = rules_run.ids
    with transaction(db) as session:
        for task_id, state in {**states, "u0": TI.SUCCESS}.items():
            session.execute(
                update(TaskInstance).where(TaskInstance.id == ids[task_id]).values(state=state)
            )
    others = [states[f"u{i}"] for i in range(1, case.upstreams)]
    upstream_ids = {f"u{i}" for i in range(case.upstreams)}
    if case.counted is Counted.OTHERS:
        names = sorted(upstream_ids - {"u0"})
    else:  # all the run's TIs but these
        names = sorted(set(ids) - upstream_ids | {"u0"})
    params = {
        "run_pk": rules_run.run_pk,
        "fan_in": names,
        "dag_hash": rules_run.dag_hash,
        "next_task": "join",
    }
    with db() as session:
        in_sql = session.scalar(select(OTHERS_SUCCEEDED[case.counted]), params)
        join_ready = session.scalar(
            select(TaskInstance.id).where(JOIN_READY[case.counted]),
            {**params, "finished_id": ids["u0"]},
        )
        unfinished = session.scalar(select(FAN_IN_COUNTING[case.counted][0]), params)
        next_ready = session.scalar(
            select(TaskInstance.id).where(FAN_OUT_READY),
            {**params, "downstream": ["next"], "finished_id": ids["solo"]},
        )
        leaf_unfinished = session.scalar(
            select(LEAF_COUNTING[0]).where(TaskInstance.id == ids["u0"]), params
        )

    python = decide(TriggerRule.ALL_SUCCESS, upstream_counts([TI.SUCCESS, *others]))
    if TI.REMOVED in others:  # the safe side: SQL queues nothing, Python decides
        assert not in_sql
    else:
        assert bool(in_sql) is (python is Verdict.RUN), python
    assert (join_ready == ids["join"]) is bool(in_sql)

    assert bool(unfinished) is any(s in TI_UNFINISHED for s in others)
    if unfinished:
        for rule in WAITS_FOR_ALL:
            before = decide(rule, upstream_counts([TI.RUNNING, *others]))
            assert decide(rule, upstream_counts([TI.SUCCESS, *others])) is before, rule

    solo = states["solo"]
    for rule in RUN_ON_ONE_SUCCESS:
        verdict = decide(rule, upstream_counts([solo]))
        assert not next_ready or verdict is Verdict.RUN, rule
    assert (next_ready == ids["next"]) is (solo is TI.SUCCESS)

    views = [
        TiView(id=ti_id, task_id=t, state={**states, "u0": TI.SUCCESS}[t])
        for t, ti_id in ids.items()
    ]
    assert bool(leaf_unfinished) is (run_outcome(rules_run.spec, views, {}) is None)
