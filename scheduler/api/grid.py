"""The grid of a DAG's newest runs by its tasks: the cells of `format=cells`, and the
compact form of `format=compact` (one string of state codes per run).

Invariants:
- Both formats show the same cells: a cell is its task's TI in the run, or, for a mapped
  task (a TI with a map index >= 0), the summary `grid_cell` makes of all its TIs.
- The compact format's `legend` is `SUMMARY_ORDER`, so a cell's code is its state's rank:
  a mapped cell shows the lowest code among its indexes.
- A compact cell's try number is `tries[row]` if listed, else `usual_try(state)`.
- On PostgreSQL the compact states are aggregated in SQL, one statement for every run
  (`_compact_rows`); the TIs of mapped or unknown tasks, few, are read apart and patched
  in. On SQLite (embedded, small DAGs) the compact grid is made from the cells.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Engine, bindparam, func, select, text
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import Session
from sqlalchemy.types import BigInteger, String

from sluice.scheduler.api.schemas import CompactGrid, CompactGridRun, GridCell, GridMapped
from sluice.scheduler.core.models import DagRun, TaskInstance
from sluice.scheduler.core.states import TI, TaskInstanceState

SUMMARY_ORDER: tuple[TaskInstanceState, ...] = (
    TI.RUNNING,
    TI.QUEUED,
    TI.SCHEDULED,
    TI.UP_FOR_RETRY,
    TI.NONE,
    TI.FAILED,
    TI.UPSTREAM_FAILED,
    TI.SUCCESS,
    TI.SKIPPED,
    TI.REMOVED,
)
"""A mapped task's cell shows the first of its indexes' states in this order: what is
still moving, then what failed, then how it ended. Every state is in it."""

CODES = "0123456789abcdefghijklmnopqrstuvwxyz"
"""The code of `SUMMARY_ORDER[i]` is `CODES[i]` (the index in base 36)."""

NO_TI = "-"
"""The code of a cell whose task has no TI in the run."""

CODE_OF: dict[str, str] = {str(s): CODES[i] for i, s in enumerate(SUMMARY_ORDER)}

TRIED: frozenset[TaskInstanceState] = frozenset(
    {TI.QUEUED, TI.RUNNING, TI.SUCCESS, TI.FAILED, TI.UP_FOR_RETRY}
)
"""States a TI reaches with a try: their usual try number is 1, the others' 0."""


def usual_try(state: str) -> int:
    """The try number a compact cell in `state` has unless `tries` lists it."""
    return 1 if state in TRIED else 0


def grid_cell(groups: Sequence[Sequence[Any]]) -> GridCell:
    """One task's cell from its TIs counted by state (run, task, state, count, highest
    try, highest map index): an unmapped task's TI, or a mapped task's summary."""
    if len(groups) == 1 and groups[0][5] < 0:
        return GridCell(state=groups[0][2], try_number=groups[0][4])
    counts = {str(g[2]): int(g[3]) for g in groups}
    shown = next(s for s in SUMMARY_ORDER if str(s) in counts)
    return GridCell(
        state=shown,
        try_number=max(int(g[4]) for g in groups),
        mapped=sum(counts.values()),
        states=counts,
    )


@dataclass(frozen=True)
class RunRow:
    """A run's columns the grid shows, and its primary key."""

    id: int
    run_id: str
    state: str
    run_type: str
    logical_date: dt.datetime
    start_date: dt.datetime | None
    end_date: dt.datetime | None

    def header(self) -> dict[str, Any]:
        """The fields both formats give of the run."""
        return {
            "run_id": self.run_id,
            "state": self.state,
            "run_type": self.run_type,
            "logical_date": self.logical_date,
            "start_date": self.start_date,
            "end_date": self.end_date,
        }


def newest_runs(session: Session, dag_id: str, limit: int) -> list[RunRow]:
    """The `limit` newest runs of the DAG by logical date, oldest first."""
    rows = session.execute(
        select(
            DagRun.id,
            DagRun.run_id,
            DagRun.state,
            DagRun.run_type,
            DagRun.logical_date,
            DagRun.start_date,
            DagRun.end_date,
        )
        .where(DagRun.dag_id == dag_id)
        .order_by(DagRun.logical_date.desc())
        .limit(limit)
    ).all()
    return [RunRow(*row) for row in reversed(rows)]


def _grouped_tis(session: Session, where: Any) -> dict[int, dict[str, GridCell]]:
    """The cells of the TIs matching `where`, by run primary key and task id."""
    rows = session.execute(
        select(
            TaskInstance.dag_run_id,
            TaskInstance.task_id,
            TaskInstance.state,
            func.count(),
            func.max(TaskInstance.try_number),
            func.max(TaskInstance.map_index),
        )
        .where(where)
        .group_by(TaskInstance.dag_run_id, TaskInstance.task_id, TaskInstance.state)
    ).all()
    return cells_of(rows)


def cells_of(rows: Iterable[Sequence[Any]]) -> dict[int, dict[str, GridCell]]:
    """Cells by run primary key and task id from TIs counted by run, task and state (the
    rows `grid_cell` takes)."""
    grouped: dict[tuple[int, str], list[Sequence[Any]]] = defaultdict(list)
    for row in rows:
        grouped[(row[0], row[1])].append(row)
    cells: dict[int, dict[str, GridCell]] = defaultdict(dict)
    for (run_pk, task_id), found in grouped.items():
        cells[run_pk][task_id] = grid_cell(found)
    return cells


def grid_cells(session: Session, runs: Sequence[RunRow]) -> dict[int, dict[str, GridCell]]:
    """Every cell of these runs, by run primary key and task id (`format=cells`)."""
    if not runs:
        return {}
    return _grouped_tis(session, TaskInstance.dag_run_id.in_([r.id for r in runs]))


def unknown_ids(order: Sequence[str], cells: Iterable[Iterable[str]]) -> list[str]:
    """The task ids of these cells not in `order`, sorted: the rows after `order`'s."""
    known = set(order)
    return sorted({t for c in cells for t in c if t not in known})


# -- the compact format --------------------------------------------------------------------


@dataclass
class CompactColumn:
    """One run's column of the compact grid, as `CompactGridRun` gives it."""

    states: list[str]
    tries: dict[int, int] = field(default_factory=dict)
    mapped: dict[int, GridMapped] = field(default_factory=dict)

    def put(self, row: int, cell: GridCell | None) -> None:
        """Set the cell of `row` (None: no TI), replacing what it held."""
        self.tries.pop(row, None)
        self.mapped.pop(row, None)
        if cell is None:
            self.states[row] = NO_TI
            return
        self.states[row] = CODE_OF[str(cell.state)]
        if cell.try_number != usual_try(cell.state):
            self.tries[row] = cell.try_number
        if cell.mapped is not None:
            self.mapped[row] = GridMapped(count=cell.mapped, states=cell.states or {})


def column_of(cells: dict[str, GridCell], task_ids: Sequence[str]) -> CompactColumn:
    """A run's compact column from its cells (the SQLite path; a loop over the rows)."""
    column = CompactColumn([NO_TI] * len(task_ids))
    for row, task_id in enumerate(task_ids):
        cell = cells.get(task_id)
        if cell is not None:
            column.put(row, cell)
    return column


def compact_grid(
    dag_id: str,
    task_ids: list[str],
    runs: Sequence[RunRow],
    columns: dict[int, CompactColumn],
    active: bool,
) -> CompactGrid:
    """The `CompactGrid` of these runs (each column's string is one str to validate)."""
    return CompactGrid(
        dag_id=dag_id,
        legend=list(SUMMARY_ORDER),
        task_ids=task_ids,
        runs=[
            CompactGridRun(
                **r.header(),
                states="".join(columns[r.id].states),
                tries=columns[r.id].tries,
                mapped=columns[r.id].mapped,
            )
            for r in runs
        ],
        active=active,
    )


def compact_columns(
    session: Session, runs: Sequence[RunRow], order: Sequence[str]
) -> tuple[list[str], dict[int, CompactColumn]]:
    """The rows (`order`, then the unknown task ids) and each run's column, by run key."""
    if not runs:
        return list(order), {}
    if session.get_bind().dialect.name != "postgresql":
        cells = grid_cells(session, runs)
        task_ids = [*order, *unknown_ids(order, cells.values())]
        return task_ids, {r.id: column_of(cells.get(r.id, {}), task_ids) for r in runs}
    return _pg_columns(session, runs, order)


def _code_case(column: str) -> str:
    """SQL: the code of the state in `column`, NO_TI when NULL (no TI)."""
    whens = " ".join(f"WHEN '{s}' THEN '{c}'" for s, c in CODE_OF.items())
    return f"CASE {column} {whens} ELSE '{NO_TI}' END"


def _usual_try_case(column: str) -> str:
    """SQL: `usual_try` of the state in `column`."""
    tried = ", ".join(f"'{s}'" for s in sorted(TRIED))
    return f"CASE WHEN {column} IN ({tried}) THEN 1 ELSE 0 END"


_COMPACT_SQL = text(
    f"""
SELECT r.id, g.states, g.tries, g.others
FROM unnest(CAST(:runs AS BIGINT[])) AS r(id)
CROSS JOIN LATERAL (
    SELECT string_agg({_code_case("ti.state")}, '' ORDER BY t.row)
               FILTER (WHERE t.row IS NOT NULL) AS states,
           json_object_agg(t.row - 1, ti.try_number)
               FILTER (WHERE t.row IS NOT NULL
                       AND ti.try_number <> {_usual_try_case("ti.state")}) AS tries,
           count(*) FILTER (WHERE t.row IS NULL) AS others
    FROM unnest(CAST(:task_ids AS TEXT[])) WITH ORDINALITY AS t(task_id, row)
    FULL JOIN (SELECT * FROM task_instance WHERE dag_run_id = r.id) AS ti
        ON ti.task_id = t.task_id AND ti.map_index = -1
) AS g
"""
).bindparams(bindparam("runs", type_=ARRAY(BigInteger)), bindparam("task_ids", type_=ARRAY(String)))
"""Per run: the codes of its unmapped TIs in row order (NO_TI for a row without one), the
tries that are not usual by row, and how many of its TIs are not a row's (mapped indexes,
unknown tasks). Per run one hash join of its TIs (read by `dag_run_id`) with the rows."""

_OTHER_CELLS_SQL = text(
    """
SELECT ti.dag_run_id, ti.task_id, ti.state, count(*), max(ti.try_number), max(ti.map_index)
FROM task_instance ti
JOIN (
    SELECT DISTINCT o.dag_run_id, o.task_id
    FROM task_instance o
    LEFT JOIN unnest(CAST(:task_ids AS TEXT[])) AS k(task_id) ON k.task_id = o.task_id
    WHERE o.dag_run_id = ANY(CAST(:runs AS BIGINT[])) AND (o.map_index >= 0 OR k.task_id IS NULL)
) AS odd ON odd.dag_run_id = ti.dag_run_id AND odd.task_id = ti.task_id
GROUP BY ti.dag_run_id, ti.task_id, ti.state
"""
).bindparams(bindparam("runs", type_=ARRAY(BigInteger)), bindparam("task_ids", type_=ARRAY(String)))
"""The TIs, counted as `grid_cell` counts them, of the cells `_COMPACT_SQL` leaves out:
mapped tasks' (all their TIs) and those of task ids not among the rows."""


_SETTINGS_SQL = text(
    "SELECT set_config('jit', 'off', true), "
    "set_config('plan_cache_mode', 'force_custom_plan', true)"
)
"""For this transaction: no JIT (the estimate of the lateral join is far above what it
costs, and compiling would cost more than running); plans made for the arrays' sizes
(a generic plan of a statement psycopg prepared knows neither)."""


SPLIT_FROM = 8
"""From this many runs on, half of them are aggregated on a second connection at the same
time (PostgreSQL runs one statement on one core): each half reads its own snapshot."""


def _aggregate(connection: Connection, run_pks: list[int], order: list[str]) -> list[Any]:
    connection.execute(_SETTINGS_SQL)
    return list(connection.execute(_COMPACT_SQL, {"runs": run_pks, "task_ids": order}))


def _aggregate_apart(engine: Engine, run_pks: list[int], order: list[str]) -> list[Any]:
    """`_aggregate` on a connection of its own (rolled back: it only reads)."""
    with engine.connect() as connection:
        return _aggregate(connection, run_pks, order)


def _compact_rows(session: Session, run_pks: list[int], order: list[str]) -> list[Any]:
    """`_COMPACT_SQL`'s rows for these runs, in two halves at once from SPLIT_FROM runs."""
    if len(run_pks) < SPLIT_FROM:
        return _aggregate(session.connection(), run_pks, order)
    half = len(run_pks) // 2
    engine = session.get_bind()
    assert isinstance(engine, Engine)
    with ThreadPoolExecutor(max_workers=1) as pool:
        apart = pool.submit(_aggregate_apart, engine, run_pks[half:], order)
        return _aggregate(session.connection(), run_pks[:half], order) + apart.result()


def _pg_columns(
    session: Session, runs: Sequence[RunRow], order: Sequence[str]
) -> tuple[list[str], dict[int, CompactColumn]]:
    found = _compact_rows(session, [r.id for r in runs], list(order))
    columns: dict[int, CompactColumn] = {}
    odd: list[int] = []
    for run_pk, states, tries, others in found:
        columns[run_pk] = CompactColumn(
            list(states or ""), {int(k): int(v) for k, v in (tries or {}).items()}
        )
        if others:
            odd.append(run_pk)
    task_ids = list(order)
    if odd:
        others = _grouped_other_cells(session, odd, order)
        task_ids += unknown_ids(order, others.values())
        _patch(columns, others, task_ids, len(order))
    return task_ids, columns


def _grouped_other_cells(
    session: Session, run_pks: list[int], order: Sequence[str]
) -> dict[int, dict[str, GridCell]]:
    """The cells of mapped tasks and of unknown task ids in these runs."""
    return cells_of(session.execute(_OTHER_CELLS_SQL, {"runs": run_pks, "task_ids": list(order)}))


def _patch(
    columns: dict[int, CompactColumn],
    others: dict[int, dict[str, GridCell]],
    task_ids: Sequence[str],
    known: int,
) -> None:
    """Put the mapped and unknown tasks' cells into the columns; every column gets a
    NO_TI code for each unknown row first."""
    row_of = {t: i for i, t in enumerate(task_ids)}
    extra = len(task_ids) - known
    for run_pk, column in columns.items():
        column.states.extend(NO_TI * extra)
        for task_id, cell in others.get(run_pk, {}).items():
            column.put(row_of[task_id], cell)
