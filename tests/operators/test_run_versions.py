"""`update_state` with a cached copy of the DAG: a run moves only forward to the stored
version, and ends only in step with it (issue 39, item 1), on PostgreSQL and SQLite."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from sluice.scheduler.core.db import transaction
from sluice.scheduler.core.models import Dag, DagRun
from sluice.scheduler.core.states import TI, DagRunState
from sluice.scheduler.core.transitions import move_ti
from sluice.scheduler.scheduling.dagrun import RunDecision, update_state
from tests.operators.helpers import World

BODY = """
with DAG("flip", schedule=None) as dag:
    @task
    def a():
        pass

    @task
    def {second}():
        pass

    a >> {second}
"""


@pytest.fixture(params=["postgresql", "sqlite"])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[World]:
    url = request.getfixturevalue("pg_url" if request.param == "postgresql" else "sqlite_url")
    folder = tmp_path / "dags"
    folder.mkdir()
    w = World(url, folder)
    yield w
    w.close()


def _copy(world: World) -> Dag:
    """The DAG's stored row as a job caches it: detached, read, never written."""
    with world.factory() as session:
        dag = session.get(Dag, "flip")
        assert dag is not None
        session.expunge(dag)
        return dag


def _decide_with(world: World, copy: Dag) -> RunDecision:
    """One scheduling decision of r1 from `copy`, the run's row locked, as a job makes it."""
    with transaction(world.factory) as session:
        run = _locked_run(session)
        return update_state(session, run, copy, world.now)


def _locked_run(session: Session) -> DagRun:
    query = select(DagRun).where(DagRun.run_id == "r1").with_for_update()
    run = session.scalar(query)
    assert run is not None
    return run


def _states(world: World) -> dict[str, str]:
    return {t: str(world.ti("flip", "r1", t).state) for t in ("a", "b", "c") if _has(world, t)}


def _has(world: World, task_id: str) -> bool:
    try:
        world.ti("flip", "r1", task_id)
    except AssertionError:
        return False
    return True


def test_a_run_does_not_end_on_a_copy_older_than_the_stored_version(world: World) -> None:
    # Given r1 of `a >> b`, a cached copy of that version, and a worker that ran `a`
    # and removed `b` (not in the file) after the sync stored `a >> c`
    world.dags(BODY.format(second="b"), name="flip")
    world.trigger("flip", "r1")
    old = _copy(world)
    world.advance("flip", "r1", "a", TI.SUCCESS)
    world.dags(BODY.format(second="c"), name="flip")
    b = world.ti("flip", "r1", "b")
    with transaction(world.factory) as session:
        assert move_ti(session, b.id, TI.REMOVED, expect=[TI.NONE], now=world.now)
    # When a job decides the run from its copy of the old version
    decision = _decide_with(world, old)
    # Then the run is not ended: it is in step with the stored version, `c` scheduled
    assert decision.finished is None
    assert _states(world) == {"a": "success", "b": "removed", "c": "scheduled"}
    stored = _copy(world).version_hash
    with world.factory() as session:
        run = session.scalar(select(DagRun).where(DagRun.run_id == "r1"))
        assert run is not None
        assert (run.state, run.dag_hash) == (DagRunState.RUNNING, stored)


def test_a_copy_older_than_the_run_never_moves_it_back(world: World) -> None:
    # Given r1 already in step with the stored `a >> c`, and a job's copy of `a >> b`
    world.dags(BODY.format(second="b"), name="flip")
    old = _copy(world)
    world.dags(BODY.format(second="c"), name="flip")
    world.trigger("flip", "r1")
    world.advance("flip", "r1", "a", TI.SUCCESS)
    # When that job decides the run from its old copy, twice
    first, second = _decide_with(world, old), _decide_with(world, old)
    # Then `b` never comes back: `c` is scheduled once, from the stored version
    assert _states(world) == {"a": "success", "c": "scheduled"}
    assert (len(first.scheduled), len(second.scheduled)) == (1, 0)
