"""The ways a finished try's result is recorded, in one table: choose, then do.

`choose(case)` is a pure function of three facts fixed when the case is made (its
`Shape`, by `decision`; its `Kind`; whether it has spans to start); each row of `PATHS`
says for which facts it applies (`when`), and no two rows apply to the same facts:
`chosen_by_facts` checks, at import, that every combination has exactly one row.
`record_result` then runs that row's function, which writes the result and says what
followed (`Then`).

Each row states once its condition, its round trips to the database, the locks it takes
(always in the order run, then TIs, then pools), what happens when it cannot finish the
job, and the steps that may follow its write. The table is the contract;
`docs/architecture.md` shows it as `table()` renders it (`python -m
sluice.broker.worker.result`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import product

from sluice.broker.worker.result.at_once import (
    chain_at_once,
    fan_in_at_once,
    fan_out_at_once,
    index_at_once,
    leaf_at_once,
)
from sluice.broker.worker.result.case import READABLE, Case, Kind, Path, Recorded, Shape, Then
from sluice.broker.worker.result.in_transaction import decided, written
from sluice.broker.worker.result.mapped_index import index_written
from sluice.scheduler.core.models import Dag
from sluice.scheduler.core.states import TI
from sluice.scheduler.decide.plans import (
    Plan,
    decidable,
    waits_for_every_index,
    wide_fan_in,
)


def decision(
    dag: Dag | None, task_id: str, pool: str, new: TI, *, decides: bool, map_index: int
) -> tuple[Shape, Plan | None]:
    """What the worker decides after `task_id`'s result `new` (the shape, and the plan it
    decides by), when it `decides` at all (publishing on, `schedule_after_task`, a
    success or a skip); from `dag`, the DAG row it ran the task from (cached plans)."""
    if not decides or dag is None:
        return Shape.SCHEDULERS, None
    plan = decidable(dag, task_id, pool, new)
    if plan is not None:
        return shape_of(plan), plan
    wide = wide_fan_in(dag, task_id, pool, new)
    if wide is not None:
        return Shape.WIDE_FAN_IN, wide
    if map_index >= 0 and waits_for_every_index(dag, task_id):
        return Shape.EVERY_INDEX, None
    return Shape.SCHEDULERS, None


def shape_of(plan: Plan) -> Shape:
    """The shape of a readable plan. Its fan-in, chain, fan-out and leaf exclude one
    another (`plans._make_plan`): a fan-in's one downstream has other upstreams, a
    chain's has none, a fan-out has several downstream, a leaf none."""
    if plan.fan_in is not None:
        return Shape.FAN_IN
    if plan.chain_next is not None:
        return Shape.CHAIN
    if plan.fan_out is not None:
        return Shape.FAN_OUT
    return Shape.READ if plan.downstream else Shape.LEAF


Facts = tuple[Shape, Kind, bool]
"""What a path is chosen by: the case's shape, its kind, whether it has spans to start."""

ANY_KIND = frozenset(Kind)
QUIET = frozenset({Kind.QUIET_SUCCESS})
NOT_QUIET = ANY_KIND - QUIET
SPANS = frozenset({False, True})


@dataclass(frozen=True)
class When:
    """The facts a row applies to: any of `shapes`, any of `kinds`, with `tracing` (spans
    to start) any of its values."""

    shapes: frozenset[Shape]
    kinds: frozenset[Kind] = ANY_KIND
    tracing: frozenset[bool] = SPANS

    def facts(self) -> Iterable[Facts]:
        return product(self.shapes, self.kinds, self.tracing)

    def __str__(self) -> str:
        parts = [" or ".join(shape.value for shape in Shape if shape in self.shapes)]
        if self.kinds != ANY_KIND:
            parts.append(" or ".join(kind.value for kind in Kind if kind in self.kinds))
        if self.tracing != SPANS:
            parts.append("spans to start" if True in self.tracing else "no spans to start")
        return "; ".join(parts)


def when(
    *shapes: Shape, kinds: frozenset[Kind] = ANY_KIND, tracing: frozenset[bool] = SPANS
) -> When:
    return When(frozenset(shapes), kinds, tracing)


@dataclass(frozen=True)
class ResultPath:
    """One way of recording a result: when it applies, what it costs and locks, its
    fallback, what may follow its write, and `record`, which does it."""

    path: Path
    when: tuple[When, ...]
    condition: str
    round_trips: str
    locks: str
    fallback: str
    then: tuple[Then, ...]
    record: Callable[[Case], Recorded]

    @property
    def name(self) -> str:
        return self.path.value


NO_SPANS = frozenset({False})
WITH_SPANS = frozenset({True})

PATHS: tuple[ResultPath, ...] = (
    ResultPath(
        path=Path.FAN_IN_AT_ONCE,
        when=(when(Shape.FAN_IN, Shape.WIDE_FAN_IN, kinds=QUIET),),
        condition="a success with no log nor asset event to store into a fan-in that waits for "
        "all its "
        "upstreams (any width), the worker deciding the downstream",
        round_trips="1: BEGIN, the run's lock, the UPDATE that writes the result and counts "
        "the other upstreams unfinished (with the pool's lock and the first TI waiting in "
        "it queued, when the process's last such result found a backlog in that pool), "
        "COMMIT; then 0 or 1 more (module at_once)",
        locks="the run's row while the query runs; the freed pool's row if TIs wait in it",
        fallback="what follows runs in a query or a transaction of its own after the commit; "
        "if it fails, the schedulers are woken (the result stays written)",
        then=(Then.NOTHING, Then.FILLED, Then.FILL, Then.JOIN, Then.DECIDE, Then.WAKE),
        record=fan_in_at_once,
    ),
    ResultPath(
        path=Path.CHAIN_AT_ONCE,
        when=(when(Shape.CHAIN, kinds=QUIET, tracing=NO_SPANS),),
        condition="a success with no log nor asset event to store of a chain's link (one "
        "downstream, whose "
        "only upstream it is, in its pool, ready on a success), no spans to start",
        round_trips="1: BEGIN, the run's lock, the result, the pool's lock, the next TI "
        "queued if nobody waits in its pool and it fits, COMMIT",
        locks="the run's row, then the pool's row, while the query runs",
        fallback="next TI not queued: decided in a transaction of its own under the run's "
        "lock; the run not the worker's to drive: the schedulers are woken",
        then=(Then.QUEUED, Then.DECIDE, Then.WAKE),
        record=chain_at_once,
    ),
    ResultPath(
        path=Path.FAN_OUT_AT_ONCE,
        when=(when(Shape.FAN_OUT, kinds=QUIET, tracing=NO_SPANS),),
        condition="a success with no log nor asset event to store of a task whose several "
        "downstream (fewer "
        "than FILL_LIMIT) it is the only upstream of, in its pool, ready on a success, no "
        "spans to start",
        round_trips="1: BEGIN, the run's lock, the result, the pool's lock, the ready "
        "downstream that fit queued by priority when nobody waits in the pool (the pool's "
        "and the DAG's room counted once), the others scheduled, the slot the result freed "
        "given to the first TI waiting, COMMIT",
        locks="the run's row, then the pool's row, while the query runs",
        fallback="the run not the worker's to drive, a downstream neither queued nor "
        "scheduled, or one left waiting with no other run's TI before it: the schedulers "
        "are woken",
        then=(Then.QUEUED, Then.WAITING, Then.WAKE),
        record=fan_out_at_once,
    ),
    ResultPath(
        path=Path.LEAF_AT_ONCE,
        when=(when(Shape.LEAF, kinds=QUIET),),
        condition="a success with no log nor asset event to store of a task with no downstream, "
        "the worker "
        "deciding (a run's last task, a branch's end)",
        round_trips="1: BEGIN, the run's lock, the UPDATE that writes the result and says "
        "whether another TI of the run is unfinished and whether TIs wait in its pool (with "
        "the pool's lock and the first TI waiting in it queued, when the process's last "
        "such result found a backlog in that pool), COMMIT; then 0 or 1 more (the fill)",
        locks="the run's row while the query runs; the freed pool's row if TIs wait in it",
        fallback="the run's last unfinished TI, or a run the worker may not drive: the "
        "schedulers are woken (they end the run); a fill that fails wakes them too",
        then=(Then.NOTHING, Then.FILLED, Then.FILL, Then.FILL_AND_WAKE, Then.WAKE),
        record=leaf_at_once,
    ),
    ResultPath(
        path=Path.DECIDED,
        when=(
            when(*READABLE, kinds=NOT_QUIET),
            when(Shape.READ, kinds=QUIET),
            when(Shape.CHAIN, Shape.FAN_OUT, kinds=QUIET, tracing=WITH_SPANS),
        ),
        condition="the worker decides the downstream, the run small enough to read (at most "
        "READ_LIMIT TIs to read), and no path above applies: a result with a log or asset events "
        "to store, or "
        "a skip, a downstream decided by reading the run (a branch's), a chain's link or a "
        "fan-out with spans to start",
        round_trips="2 to 4: BEGIN with the run's lock (and a fan-in's counting UPDATE), "
        "the log, the result with its read, the queueing, COMMIT",
        locks="the run's row first, then the TIs it writes, then the pools it queues into",
        fallback="the run claimed by a job, of another DAG version or waiting for a "
        "scheduler to continue its spans: the result written, the schedulers woken",
        then=(),
        record=decided,
    ),
    ResultPath(
        path=Path.INDEX_AT_ONCE,
        when=(when(Shape.EVERY_INDEX, kinds=QUIET),),
        condition="a success with no log nor asset event to store of one index of a mapped task "
        "whose "
        "downstream waits for every index (none follows it one to one)",
        round_trips="1: BEGIN, the run's lock, the UPDATE that writes the result and says "
        "whether another index is unfinished, the pool's lock, the first TI waiting in it "
        "queued if it fits, COMMIT; with spans to start, the fill is 1 transaction more",
        locks="the run's row, then the freed pool's row, while the query runs",
        fallback="the last index, or a run the worker may not drive: the schedulers are "
        "woken and decide what follows",
        then=(Then.NOTHING, Then.FILLED, Then.FILL, Then.WAKE),
        record=index_at_once,
    ),
    ResultPath(
        path=Path.INDEX_WRITTEN,
        when=(when(Shape.EVERY_INDEX, kinds=frozenset({Kind.LOGGED_SUCCESS})),),
        condition="a success with a log or asset events to store of one index of a mapped task "
        "whose "
        "downstream waits for every index",
        round_trips="2 or 3: BEGIN with the run's lock and the result's UPDATE that says "
        "whether another index is unfinished and TIs wait in its pool, the log, the freed "
        "slot filled if they do, COMMIT",
        locks="the run's row first, then the TI, then the freed pool's row",
        fallback="the last index, or a run the worker may not drive: the schedulers are "
        "woken and decide what follows",
        then=(),
        record=index_written,
    ),
    ResultPath(
        path=Path.WRITTEN,
        when=(
            when(Shape.SCHEDULERS),
            when(Shape.WIDE_FAN_IN, kinds=NOT_QUIET),
            when(Shape.EVERY_INDEX, kinds=frozenset({Kind.OTHER})),
        ),
        condition="the schedulers decide what follows: a failure or a retry, downstream "
        "decisions off, a task not run from the stored DAG, a run too wide to read (but a "
        "quiet fan-in success), a skipped index",
        round_trips="1 or 2: the result's compare-and-set (and the log) in one transaction",
        locks="the TI's row",
        fallback="none needed: the schedulers are woken and decide what follows",
        then=(),
        record=written,
    ),
)


def chosen_by_facts(paths: Iterable[ResultPath]) -> dict[Facts, Path]:
    """The path of every combination of facts; a ValueError if two rows apply to the
    same facts or none applies to some."""
    chosen: dict[Facts, Path] = {}
    for row in paths:
        for facts in (f for box in row.when for f in box.facts()):
            if facts in chosen:
                raise ValueError(f"{chosen[facts]} and {row.path} both apply to {facts}")
            chosen[facts] = row.path
    missing = set(product(Shape, Kind, SPANS)) - chosen.keys()
    if missing:
        raise ValueError(f"no path applies to {sorted(missing)}")
    return chosen


_CHOSEN = chosen_by_facts(PATHS)
_RECORD = {row.path: row.record for row in PATHS}


def choose(case: Case) -> Path:
    """The one path of `PATHS` that applies to `case` (no database read)."""
    return _CHOSEN[case.shape, case.kind, case.tracing]


def record_result(case: Case) -> Recorded:
    """Record `case` by its path (`choose`): its write, and what followed."""
    return _RECORD[choose(case)](case)


def table() -> str:
    """`PATHS` as the Markdown table `docs/architecture.md` shows."""
    lines = [
        "| path | when (shape; result; spans) | condition | round trips | locks | fallback "
        "| then |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in PATHS:
        cells = [
            f"`{row.name}`",
            "<br>".join(str(box) for box in row.when),
            row.condition,
            row.round_trips,
            row.locks,
            row.fallback,
            ", ".join(f"`{then}`" for then in row.then) or "-",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
