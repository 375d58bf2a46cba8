"""Choosing a result's path (`result.paths.choose`), without a database: every
combination of the facts it reads has exactly one path, each row's condition holds for
the results it names and not beside them, and docs/architecture.md shows `PATHS` as it is.

Finding (issue 40): the 8 rows' conditions overlapped, so their order decided, and the
docs' table had drifted from them (4 paths named where 8 exist, two round trips differ).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from itertools import product
from pathlib import Path as FilePath

import pytest
from sqlalchemy.orm import sessionmaker

from sluice import DAG, task
from sluice.broker.worker.result import PATHS, Case, Path, decision
from sluice.broker.worker.result.__main__ import END, START, replaced
from sluice.broker.worker.result.case import Kind, Shape
from sluice.broker.worker.result.paths import (
    ResultPath,
    When,
    choose,
    chosen_by_facts,
    table,
)
from sluice.scheduler.core.models import Dag
from sluice.scheduler.core.queries.task_logs import LogSnapshot
from sluice.scheduler.core.states import TI
from sluice.scheduler.decide.plans import READ_LIMIT
from sluice.tasks.serialize import serialize_dag, version_hash

ARCHITECTURE = FilePath(__file__).resolve().parents[2] / "docs" / "architecture.md"


def test_every_combination_of_facts_has_exactly_one_path() -> None:
    """No two rows apply to the same result, and none is left without a row: the order
    of `PATHS` decides nothing."""
    for facts in product(Shape, Kind, (False, True)):
        applying = [row.name for row in PATHS if any(facts in set(b.facts()) for b in row.when)]
        assert len(applying) == 1, (facts, applying)


def test_a_table_whose_rows_overlap_or_leave_a_gap_is_refused() -> None:
    chain = next(row for row in PATHS if row.path is Path.CHAIN_AT_ONCE)
    greedy = replace(chain, when=(When(frozenset({Shape.CHAIN})),))
    with pytest.raises(ValueError, match="both apply to"):
        chosen_by_facts((*PATHS, greedy))
    with pytest.raises(ValueError, match="no path applies to"):
        chosen_by_facts(row for row in PATHS if row is not chain)


def _dag(built: DAG) -> Dag:
    spec = serialize_dag(built)
    return Dag(
        dag_id=built.dag_id, fileloc="/x.py", version_hash=version_hash(spec), serialized=spec
    )


def _shapes() -> Dag:
    """One DAG with every shape: a chain, a fan-out, a fan-in, a wide fan-in, a branch,
    a leaf and a mapped task whose downstream waits for every index."""
    with DAG("shapes", schedule=None) as built:
        task(task_id="link")(lambda: 0) >> task(task_id="next")(lambda: 0)
        task(task_id="root")(lambda: 0) >> [task(task_id=f"o{i}")(lambda: 0) for i in range(3)]
        [task(task_id=f"u{i}")(lambda: 0) for i in range(2)] >> task(task_id="join")(lambda: 0)
        wide = [task(task_id=f"w{i}")(lambda: 0) for i in range(READ_LIMIT + 1)]
        wide >> task(task_id="wide_join")(lambda: 0)
        pick = task.branch(task_id="pick")(lambda: "chosen")
        pick >> [task(task_id="chosen")(lambda: 0), task(task_id="other")(lambda: 0)]
        task(task_id="alone")(lambda: 0)

        @task
        def each(x: int) -> int:
            return x

        each.expand(x=[1, 2]) >> task(task_id="reduce")(lambda: 0)
    return _dag(built)


SHAPES = _shapes()
LOG = LogSnapshot(
    ti_id=1,
    try_number=1,
    attempt_id="a",
    hostname="h",
    content="hello\n",
    dropped_lines=0,
    started_at=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
    finished_at=None,
)


def case_of(
    task_id: str,
    new: TI = TI.SUCCESS,
    *,
    logged: bool = False,
    tracing: bool = False,
    decides: bool = True,
    dag: Dag | None = SHAPES,
    map_index: int = -1,
) -> Case:
    """The case the worker makes for `task_id`'s result `new` (no database: the factory
    is never bound, and `choose` never uses it)."""
    shape, plan = decision(dag, task_id, "default_pool", new, decides=decides, map_index=map_index)
    return Case(
        factory=sessionmaker(),
        ti_id=1,
        attempt_id="a",
        task_id=task_id,
        run_pk=1,
        pool="default_pool",
        dag=dag,
        new=new,
        values={},
        task_log=LOG if logged else None,
        tracing=tracing,
        shape=shape,
        plan=plan,
    )


@pytest.mark.parametrize(
    ("case", "shape", "path"),
    [
        # a fan-in's upstream: one query when quiet, whatever its width
        (case_of("u0"), Shape.FAN_IN, Path.FAN_IN_AT_ONCE),
        (case_of("u0", tracing=True), Shape.FAN_IN, Path.FAN_IN_AT_ONCE),
        (case_of("u0", logged=True), Shape.FAN_IN, Path.DECIDED),
        (case_of("w0"), Shape.WIDE_FAN_IN, Path.FAN_IN_AT_ONCE),
        (case_of("w0", logged=True), Shape.WIDE_FAN_IN, Path.WRITTEN),
        # a chain's link and a fan-out's root: one query when quiet with no spans
        (case_of("link"), Shape.CHAIN, Path.CHAIN_AT_ONCE),
        (case_of("link", tracing=True), Shape.CHAIN, Path.DECIDED),
        (case_of("link", logged=True), Shape.CHAIN, Path.DECIDED),
        (case_of("root"), Shape.FAN_OUT, Path.FAN_OUT_AT_ONCE),
        (case_of("root", tracing=True), Shape.FAN_OUT, Path.DECIDED),
        (case_of("root", logged=True), Shape.FAN_OUT, Path.DECIDED),
        # no downstream: one query when quiet, spans or not; a skip is decided
        (case_of("alone"), Shape.LEAF, Path.LEAF_AT_ONCE),
        (case_of("alone", tracing=True), Shape.LEAF, Path.LEAF_AT_ONCE),
        (case_of("alone", TI.SKIPPED), Shape.LEAF, Path.DECIDED),
        # a branch's choice: read and decided
        (case_of("pick"), Shape.READ, Path.DECIDED),
        (case_of("link", TI.SKIPPED), Shape.READ, Path.DECIDED),
        # an index whose downstream waits for every index
        (case_of("each", map_index=0), Shape.EVERY_INDEX, Path.INDEX_AT_ONCE),
        (case_of("each", map_index=0, logged=True), Shape.EVERY_INDEX, Path.INDEX_WRITTEN),
        (case_of("each", TI.SKIPPED, map_index=0), Shape.EVERY_INDEX, Path.WRITTEN),
        # the schedulers decide: a failure, decisions off, no stored DAG
        (case_of("link", TI.FAILED, decides=False), Shape.SCHEDULERS, Path.WRITTEN),
        (case_of("link", decides=False), Shape.SCHEDULERS, Path.WRITTEN),
        (case_of("link", dag=None), Shape.SCHEDULERS, Path.WRITTEN),
    ],
    ids=lambda v: v.task_id if isinstance(v, Case) else str(v),
)
def test_each_result_has_its_path(case: Case, shape: Shape, path: Path) -> None:
    assert (case.shape, choose(case)) == (shape, path)


def test_each_row_is_chosen_by_some_result() -> None:
    chosen = set(chosen_by_facts(PATHS).values())
    assert chosen == set(Path) == {row.path for row in PATHS}


def test_the_docs_show_the_table_of_paths_as_it_is() -> None:
    """docs/architecture.md's table is `table()` (rewrite it with `python -m
    sluice.broker.worker.result --write docs/architecture.md`)."""
    text = ARCHITECTURE.read_text()
    assert START in text and END in text
    assert f"{START}\n{table()}\n{END}" in text
    assert replaced(text) == text


def test_the_table_names_every_path_and_what_may_follow_it() -> None:
    rendered = table()
    for row in PATHS:
        assert isinstance(row, ResultPath)
        assert f"| `{row.name}` |" in rendered
        for then in row.then:
            assert f"`{then}`" in rendered
