"""The grid of a DAG's newest runs by its tasks: the cells of `format=cells`, and the
compact form of `format=compact` (one string of state codes per run).

Invariants:
- Both formats show the same cells: a cell is its task's TI in the run, or, for a mapped
  task (a TI with a map index >= 0), the summary `grid_cell` makes of all its TIs.
- The compact format's `legend` is `SUMMARY_ORDER`, so a cell's code is its state's rank
  in base 36 (`CODES`): a mapped cell shows the lowest code among its indexes. A state
  added to `SUMMARY_ORDER` is all the format needs (codes, SQL and the UI's decoder follow
  the legend), up to 26 states (`ODD_CODES`).
- A compact cell's try number is `tries[row]` if listed, else `usual_try(state)`; the
  format lists the states whose usual try is 1 (`TRIED`) as `tried`.
- On PostgreSQL the compact states are aggregated in SQL, one statement for every run
  (`_compact_rows`): a run whose unmapped TIs are exactly the rows' tasks is read in the
  unique index's order and its codes put in row order in Python (`_indexed_rows`); the
  others are joined with the rows. The TIs of mapped or unknown tasks, few, are read apart
  and patched in. On SQLite (embedded, small DAGs) the compact grid is made from the cells.
- A compact grid of its first `rows` rows (what the web UI shows) reads only those rows'
  TIs (by the unique index on run, task and map index): its cost follows the rows shown,
  not the DAG's size. Task ids of older versions come after the DAG's own rows, so a
  window that ends within them has none.
"""

from __future__ import annotations

import datetime as dt
import operator
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import bindparam, func, select, text
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import Session
from sqlalchemy.types import BigInteger, String

from sluice.scheduler.api.schemas import CompactGrid, CompactGridRun, GridCell, GridMapped
from sluice.scheduler.api.views import version_ref_out
from sluice.scheduler.core.models import DagRun, DagVersion, TaskInstance
from sluice.scheduler.core.queries.version_reads import VersionRef
from sluice.scheduler.core.states import TI, TaskInstanceState

SUMMARY_ORDER: tuple[TaskInstanceState, ...] = (
    TI.RUNNING,
    TI.QUEUED,
    TI.SCHEDULED,
    TI.UP_FOR_RETRY,
    TI.UP_FOR_RESCHEDULE,
    TI.DEFERRED,
    TI.NONE,
    TI.FAILED,
    TI.UPSTREAM_FAILED,
    TI.SUCCESS,
    TI.SKIPPED,
    TI.REMOVED,
)
"""A mapped task's cell shows the first of its indexes' states in this order: what is
still moving, then what failed, then how it ended. Every state is in it, once."""

CODES = "0123456789abcdefghijklmnopqrstuvwxyz"
"""The code of `SUMMARY_ORDER[i]` is `CODES[i]` (the index in base 36)."""

NO_TI = "-"
"""The code of a cell whose task has no TI in the run."""

CODE_OF: dict[str, str] = {str(s): CODES[i] for i, s in enumerate(SUMMARY_ORDER)}

ODD_CODES = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
"""`_INDEXED_SQL`'s code of `SUMMARY_ORDER[i]` when the cell's try is not the usual one:
`ODD_CODES[i]`, an upper-case letter, never a code of `CODES` (digits, then lower case):
the two sets stay apart for up to 26 states (the first ten's '0'-'9' are 'A'-'J', as when
there were ten; the eleventh's 'a' is 'K'). Internal: the format never shows them."""
ODD_CODE_OF: dict[str, str] = {str(s): ODD_CODES[i] for i, s in enumerate(SUMMARY_ORDER)}
_ODD = re.compile(f"[{ODD_CODES[0]}-{ODD_CODES[-1]}]")
_UNSHIFT = str.maketrans(ODD_CODES[: len(SUMMARY_ORDER)], CODES[: len(SUMMARY_ORDER)])

TRIED: frozenset[TaskInstanceState] = frozenset(
    {
        TI.QUEUED,
        TI.RUNNING,
        TI.SUCCESS,
        TI.FAILED,
        TI.UP_FOR_RETRY,
        TI.UP_FOR_RESCHEDULE,
        TI.DEFERRED,
    }
)
"""States a TI reaches with a try: their usual try number is 1, the others' 0. A sensor
between two pokes (`up_for_reschedule`), or waiting on its trigger (`deferred`), is within
its try: its usual try is 1 too."""


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
    bundle_version: str | None = None
    version: VersionRef | None = None
    """The `dag_version` the run follows (a git bundle's DAG), its commit and subject."""

    def header(self) -> dict[str, Any]:
        """The fields both formats give of the run."""
        return {
            "run_id": self.run_id,
            "state": self.state,
            "run_type": self.run_type,
            "logical_date": self.logical_date,
            "start_date": self.start_date,
            "end_date": self.end_date,
            "bundle_version": self.bundle_version,
            "version": version_ref_out(self.version),
        }


def newest_runs(session: Session, dag_id: str, limit: int) -> list[RunRow]:
    """The `limit` newest runs of the DAG by logical date, oldest first, each with the
    version it follows (an outer join on the version's primary key)."""
    rows = session.execute(
        select(
            DagRun.id,
            DagRun.run_id,
            DagRun.state,
            DagRun.run_type,
            DagRun.logical_date,
            DagRun.start_date,
            DagRun.end_date,
            DagRun.bundle_version,
            DagVersion.commit_sha,
            DagVersion.subject,
        )
        .outerjoin(DagVersion, DagVersion.id == DagRun.dag_version_id)
        .where(DagRun.dag_id == dag_id)
        .order_by(DagRun.logical_date.desc())
        .limit(limit)
    ).all()
    return [
        RunRow(*row[:8], version=VersionRef(row[8], row[9]) if row[8] is not None else None)
        for row in reversed(rows)
    ]


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

    def truncate(self, rows: int) -> None:
        """Keep the first `rows` rows."""
        del self.states[rows:]
        self.tries = {r: t for r, t in self.tries.items() if r < rows}
        self.mapped = {r: m for r, m in self.mapped.items() if r < rows}


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
    rows_total: int,
) -> CompactGrid:
    """The `CompactGrid` of these runs (each column's string is one str to validate)."""
    return CompactGrid(
        dag_id=dag_id,
        legend=list(SUMMARY_ORDER),
        tried=[s for s in SUMMARY_ORDER if s in TRIED],
        task_ids=task_ids,
        rows_total=rows_total,
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
    session: Session, runs: Sequence[RunRow], order: Sequence[str], rows: int | None = None
) -> tuple[list[str], dict[int, CompactColumn], int]:
    """The rows (`order`, then the unknown task ids; the first `rows` of them if given),
    each run's column by run key, and how many rows the whole grid has (when the window
    ends within `order`, the unknown ids are not looked for: `len(order)`)."""
    windowed = rows is not None and rows < len(order)
    window = list(order[:rows]) if windowed else list(order)
    if not runs:
        return window, {}, len(order)
    if session.get_bind().dialect.name != "postgresql":
        cells = grid_cells(session, runs)
        every = [*order, *unknown_ids(order, cells.values())]
        task_ids = every[:rows]
        columns = {r.id: column_of(cells.get(r.id, {}), task_ids) for r in runs}
        return task_ids, columns, len(every)
    task_ids, columns = _pg_columns(session, runs, window, windowed)
    total = len(order) if windowed else len(task_ids)
    if rows is not None and len(task_ids) > rows:  # the unknown ids past the window
        task_ids = task_ids[:rows]
        for column in columns.values():
            column.truncate(rows)
    return task_ids, columns, total


def _code_case(column: str) -> str:
    """SQL: the code of the state in `column`, NO_TI when NULL (no TI)."""
    whens = " ".join(f"WHEN '{s}' THEN '{c}'" for s, c in CODE_OF.items())
    return f"CASE {column} {whens} ELSE '{NO_TI}' END"


def _usual_try_case(column: str) -> str:
    """SQL: `usual_try` of the state in `column`."""
    tried = ", ".join(f"'{s}'" for s in sorted(TRIED))
    return f"CASE WHEN {column} IN ({tried}) THEN 1 ELSE 0 END"


_COMPACT_TEXT = f"""
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
"""Per run: the codes of its unmapped TIs in row order (NO_TI for a row without one), the
tries that are not usual by row, and how many of its TIs are not a row's (mapped indexes,
unknown tasks). Per run one hash join of its TIs (read by `dag_run_id`) with the rows."""

_COMPACT_WINDOW_TEXT = f"""
SELECT r.id, g.states, g.tries, g.others
FROM unnest(CAST(:runs AS BIGINT[])) AS r(id)
CROSS JOIN LATERAL (
    SELECT string_agg({_code_case("ti.state")}, '' ORDER BY t.row) AS states,
           json_object_agg(t.row - 1, ti.try_number)
               FILTER (WHERE ti.try_number <> {_usual_try_case("ti.state")}) AS tries,
           (SELECT count(*) FROM task_instance AS o
            WHERE o.dag_run_id = r.id AND o.task_id = ANY(CAST(:task_ids AS TEXT[]))
              AND o.map_index >= 0) AS others
    FROM unnest(CAST(:task_ids AS TEXT[])) WITH ORDINALITY AS t(task_id, row)
    LEFT JOIN LATERAL (
        SELECT state, try_number FROM task_instance
        WHERE dag_run_id = r.id AND task_id = t.task_id AND map_index = -1 LIMIT 1
    ) AS ti ON true
) AS g
"""
"""`_COMPACT_TEXT` for a window of the first rows: each row's TI looked up by the unique
index on (run, task, map index), and the mapped indexes of the rows' tasks counted by
it; the run's other TIs are not read (unknown task ids come after the DAG's rows). The
lookup is a LATERAL with LIMIT 1 (the key is unique), which the planner cannot flatten
into a join: as a join it read all of a run's TIs from the index to hash them, 2.7 ms
a run of 10,000 TIs against 0.5 ms for 200 lookups."""
_WINDOW = "AND task_id = ANY(CAST(:task_ids AS TEXT[]))"
"""Only the rows' TIs."""


def _arrays(statement: str) -> Any:
    return text(statement).bindparams(
        bindparam("runs", type_=ARRAY(BigInteger)), bindparam("task_ids", type_=ARRAY(String))
    )


_COMPACT_SQL = _arrays(_COMPACT_TEXT)
_COMPACT_WINDOW_SQL = _arrays(_COMPACT_WINDOW_TEXT)

_OTHER_CELLS_TEXT = """
SELECT ti.dag_run_id, ti.task_id, ti.state, count(*), max(ti.try_number), max(ti.map_index)
FROM task_instance ti
JOIN (
    SELECT DISTINCT o.dag_run_id, o.task_id
    FROM task_instance o
    LEFT JOIN unnest(CAST(:task_ids AS TEXT[])) AS k(task_id) ON k.task_id = o.task_id
    WHERE o.dag_run_id = ANY(CAST(:runs AS BIGINT[])) AND (o.map_index >= 0 OR k.task_id IS NULL)
    {window}
) AS odd ON odd.dag_run_id = ti.dag_run_id AND odd.task_id = ti.task_id
GROUP BY ti.dag_run_id, ti.task_id, ti.state
"""
_OTHER_CELLS_SQL = _arrays(_OTHER_CELLS_TEXT.replace("{window}", ""))
_OTHER_CELLS_WINDOW_SQL = _arrays(_OTHER_CELLS_TEXT.replace("{window}", "AND o." + _WINDOW[4:]))
"""The TIs, counted as `grid_cell` counts them, of the cells `_COMPACT_SQL` leaves out:
mapped tasks' (all their TIs) and those of task ids not among the rows."""


_SETTINGS_SQL = text(
    "SELECT set_config('jit', 'off', true), "
    "set_config('plan_cache_mode', 'force_custom_plan', true)"
)
"""For this transaction: no JIT (the estimate of the lateral join is far above what it
costs, and compiling would cost more than running); plans made for the arrays' sizes
(a generic plan of a statement psycopg prepared knows neither)."""


def _compact_rows(
    session: Session, run_pks: list[int], order: list[str], windowed: bool
) -> list[Any]:
    """`_COMPACT_SQL`'s rows for these runs (of the rows' TIs alone when `windowed`): the
    runs whose unmapped TIs are the rows' tasks, one each, read in index order
    (`_indexed_rows`), the others by `_COMPACT_SQL`."""
    session.execute(_SETTINGS_SQL)
    if windowed:
        return list(session.execute(_COMPACT_WINDOW_SQL, {"runs": run_pks, "task_ids": order}))
    found, left = _indexed_rows(session, run_pks, order)
    if left:
        found += session.execute(_COMPACT_SQL, {"runs": left, "task_ids": order})
    return found


_MOST_MET: tuple[TaskInstanceState, ...] = (
    TI.SUCCESS,
    TI.NONE,
    TI.SKIPPED,
    TI.FAILED,
    TI.UPSTREAM_FAILED,
    TI.RUNNING,
    TI.QUEUED,
    TI.SCHEDULED,
)
BY_FREQUENCY: tuple[TaskInstanceState, ...] = (
    *_MOST_MET,
    *(s for s in SUMMARY_ORDER if s not in _MOST_MET),
)
"""`SUMMARY_ORDER`'s states in the order a grid meets them most (a CASE tries its WHENs in
turn, for each of a big grid's TIs): those of `_MOST_MET`, then the rarer ones (waiting,
removed) in `SUMMARY_ORDER`'s order, so that a state added there has its WHEN too."""


def _cell_code_case(state: str, try_number: str) -> str:
    """SQL: a TI's code in one CASE, its `ODD_CODES` code when its try is not the usual
    one for its state (`usual_try`); NO_TI for a state outside `SUMMARY_ORDER`."""
    whens = []
    for s in BY_FREQUENCY:
        code, odd, usual = CODE_OF[str(s)], ODD_CODE_OF[str(s)], usual_try(s)
        whens.append(
            f"WHEN '{s}' THEN CASE {try_number} WHEN {usual} THEN '{code}' ELSE '{odd}' END"
        )
    return f"CASE {state} {' '.join(whens)} ELSE '{NO_TI}' END"


_INDEXED_TEXT = f"""
SELECT r.id, g.states, g.tries, g.unmapped, g.known, g.others
FROM unnest(CAST(:runs AS BIGINT[])) AS r(id)
CROSS JOIN LATERAL (
    SELECT string_agg(ti.code, '') FILTER (WHERE ti.map_index = -1) AS states,
           string_agg(ti.try_number::text, ',')
               FILTER (WHERE ti.map_index = -1
                       AND ti.code COLLATE "C" BETWEEN '{ODD_CODES[0]}' AND '{ODD_CODES[-1]}')
               AS tries,
           count(*) FILTER (WHERE ti.map_index = -1) AS unmapped,
           md5(string_agg(ti.task_id, ',') FILTER (WHERE ti.map_index = -1)) AS known,
           count(*) FILTER (WHERE ti.map_index >= 0) AS others
    FROM (SELECT task_id, map_index, try_number,
                 {_cell_code_case("state", "try_number")} AS code
          FROM task_instance WHERE dag_run_id = r.id ORDER BY task_id, map_index) AS ti
) AS g
"""
"""Per run, its TIs in the order of the unique index on (run, task, map index), with no
join and no sort: the codes of its unmapped TIs (one CASE a TI: its `ODD_CODES` code
when its try is unusual, told apart from the codes by a byte comparison) and those tries
in the same order (each aggregate takes the subquery's rows in its order: a subquery
with ORDER BY is not flattened, and a plan parameterized by the run is never parallel);
how many unmapped TIs there are and the md5 of their task ids joined by commas (the
rows' own, in the same order, when each is a row's task: a task id never holds a comma);
how many TIs are mapped indexes. A hash of the ids costs a quarter of looking each up
among the rows."""
_INDEXED_SQL = text(_INDEXED_TEXT).bindparams(bindparam("runs", type_=ARRAY(BigInteger)))

_COLLATED_SQL = text(
    "SELECT array_agg(o.row ORDER BY o.task_id, o.row), "
    "md5(string_agg(o.task_id, ',' ORDER BY o.task_id, o.row)) "
    "FROM unnest(string_to_array(:task_ids, ',')) WITH ORDINALITY AS o(task_id, row)"
)
"""The rows (from 1) in the order of their task ids by the database's collation: the
unique index's order, as `task_instance.task_id` has the database's default collation;
and the md5 of the ids joined in that order (`_INDEXED_SQL`'s `known` of a run whose
unmapped TIs are exactly the rows' tasks)."""

_BITMAP_SCANS_SQL = text("SELECT set_config('enable_bitmapscan', :value, true)")


def _indexed_rows(
    session: Session, run_pks: list[int], order: list[str]
) -> tuple[list[Any], list[int]]:
    """`_COMPACT_SQL`'s rows of the runs whose unmapped TIs are exactly the rows' tasks,
    read by `_INDEXED_SQL` and put in row order here; and the other runs' keys. A run of
    the DAG's version that no mapped task expanded has one TI per row: reading it in index
    order costs about half of joining it with the rows."""
    joined = ",".join(order)
    if not run_pks or not order or joined.count(",") != len(order) - 1:
        return [], list(run_pks)
    collated, digest = session.execute(_COLLATED_SQL, {"task_ids": joined}).one()
    position = [0] * len(order)
    for at, row in enumerate(collated):
        position[row - 1] = at
    in_rows = operator.itemgetter(*position)
    was = session.execute(text("SELECT current_setting('enable_bitmapscan')")).scalar_one()
    session.execute(_BITMAP_SCANS_SQL, {"value": "off"})  # the index's order, not a sort
    try:
        found = session.execute(_INDEXED_SQL, {"runs": run_pks, "task_ids": joined}).all()
    finally:
        session.execute(_BITMAP_SCANS_SQL, {"value": was})
    rows, left = [], []
    for run_pk, states, tries, unmapped, known, others in found:
        if unmapped != len(order) or known != digest:
            left.append(run_pk)
            continue
        odd = [collated[m.start()] - 1 for m in _ODD.finditer(states)]
        tried = dict(zip(odd, tries.split(","), strict=True)) if odd else {}
        rows.append((run_pk, "".join(in_rows(states.translate(_UNSHIFT))), tried, others))
    return rows, left


def _pg_columns(
    session: Session, runs: Sequence[RunRow], order: Sequence[str], windowed: bool
) -> tuple[list[str], dict[int, CompactColumn]]:
    found = _compact_rows(session, [r.id for r in runs], list(order), windowed)
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
        others = _grouped_other_cells(session, odd, order, windowed)
        task_ids += unknown_ids(order, others.values())
        _patch(columns, others, task_ids, len(order))
    return task_ids, columns


def _grouped_other_cells(
    session: Session, run_pks: list[int], order: Sequence[str], windowed: bool
) -> dict[int, dict[str, GridCell]]:
    """The cells of mapped tasks and of unknown task ids in these runs (of the rows'
    mapped tasks alone when `windowed`)."""
    statement = _OTHER_CELLS_WINDOW_SQL if windowed else _OTHER_CELLS_SQL
    return cells_of(session.execute(statement, {"runs": run_pks, "task_ids": list(order)}))


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
