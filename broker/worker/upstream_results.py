"""The upstream results a try's arguments or context take: their queries, and this
process's copy of the large ones.

Every index of a task mapped over an upstream's list reads that upstream's row: without
a copy, each of n indexes would fetch and PostgreSQL would detoast the whole list, O(n)
a claim and O(n²) a map. So a process keeps the text of the large results it read
(`ResultCopies`), by the attempt that wrote them, and the queries send a result only when
its attempt is not one the process names (`KNOWN_ATTEMPTS`).

Invariant: a TI's `result` is written only with the success of the attempt holding
`attempt_id` (the worker's compare-and-set on it), and a new try gets a new attempt id;
marking or clearing a TI leaves `result` alone. So a `success` row's attempt id names one
result text for good, and a copy is never stale. The copies hold text, not parsed
values: each try parses its own, so what user code does to its arguments stays its own.
"""

from __future__ import annotations

import copy
import json
import logging
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from cachetools import LRUCache
from sqlalchemy import String, bindparam, case, literal_column, or_, select

from sluice.scheduler.core.hot_sql import hot
from sluice.scheduler.core.models import TaskInstance
from sluice.scheduler.core.named_sql import hot_statement, same_values
from sluice.scheduler.core.states import TI

log = logging.getLogger(__name__)

_TI = TaskInstance.__table__

_COMMA = literal_column("','", String)
KNOWN_ATTEMPTS = hot(
    "result not sent for a known attempt",
    case(
        (
            (_TI.c.state == TI.SUCCESS.value)
            & bindparam("known_attempts", type_=String).contains(
                _COMMA + _TI.c.attempt_id + _COMMA
            ),
            None,
        ),
        else_=_TI.c.result,
    ).label("result"),
    "A success's result is left out when its attempt id is in the process's list of "
    "attempts whose result it holds (',a1,a2,': each id matched whole, between commas; "
    "at most COPIES of them).",
    twin=True,
)
_COLUMNS = (_TI.c.task_id, _TI.c.map_index, _TI.c.state, _TI.c.attempt_id, KNOWN_ATTEMPTS)
_BY_TASK = (_TI.c.task_id, _TI.c.map_index)

_CLAIMED_TI = select(_TI.c.dag_run_id, _TI.c.map_index).where(_TI.c.id == bindparam("ti_id"))
_CLAIMED_RUN = _CLAIMED_TI.with_only_columns(_TI.c.dag_run_id).scalar_subquery()
_CLAIMED_INDEX = _CLAIMED_TI.with_only_columns(_TI.c.map_index).scalar_subquery()


def _rows_of(index: Any) -> Any:
    """The rows of the upstream tasks `task_ids` and, of `per_task` (the task mapped one
    to one, not in `task_ids`; '' for none), index `index`'s alone: each index of a
    mapped chain reads one row of its upstream (two index scans, OR-ed)."""
    per_task = bindparam("per_task", type_=String)
    return or_(
        _TI.c.task_id.in_(bindparam("task_ids", expanding=True)),
        (_TI.c.task_id == per_task) & (_TI.c.map_index == index),
    )


_UPSTREAM_OF_TI = hot(
    "upstream results of the claimed TI (SQLite)",
    select(*_COLUMNS)
    .where(_TI.c.dag_run_id == _CLAIMED_RUN, _rows_of(_CLAIMED_INDEX))
    .order_by(*_BY_TASK),
    "The upstream results, read in the claim's query (after its UPDATE) for a task whose "
    "arguments take them: its run and its map index found by the claimed TI's key.",
    twin=True,
)
_UPSTREAM_RESULTS = hot(
    "upstream results (SQLite)",
    select(*_COLUMNS)
    .where(_TI.c.dag_run_id == bindparam("run_pk"), _rows_of(bindparam("map_index")))
    .order_by(*_BY_TASK),
    "The upstream tasks' TIs, a mapped task's indexes in map-index order (its results "
    "are passed as a list, of the indexes that succeeded).",
    twin=True,
)

UPSTREAM_OF_TI = hot_statement("upstream_results_of_the_claimed_ti", same_values(_UPSTREAM_OF_TI))
"""scheduler/core/sql/claim.sql; on SQLite its twin, the same parameters."""
UPSTREAM_RESULTS = hot_statement("upstream_results", same_values(_UPSTREAM_RESULTS))
"""scheduler/core/sql/claim.sql; on SQLite its twin, the same parameters."""

COPIES = 16
"""Results a process keeps (the attempts it names in every upstream read)."""
COPY_MIN_BYTES = 1024
"""A smaller result is read again: it costs the query nothing worth a copy."""
COPIES_MAX_BYTES = 32 * 1024 * 1024
"""The copies' text in all, at most."""


class ResultCopies:
    """The text of large upstream results this process read, by the attempt that wrote
    them; the least recently used goes first, past `copies` texts or `max_bytes` in all
    (a cachetools `LRUCache` sized by the texts' length). Thread-safe (a threads pool
    shares it)."""

    def __init__(
        self,
        copies: int = COPIES,
        min_bytes: int = COPY_MIN_BYTES,
        max_bytes: int = COPIES_MAX_BYTES,
    ) -> None:
        self._copies = copies
        self._min_bytes = min_bytes
        self._max_bytes = max_bytes
        self._texts: LRUCache[str, str] = LRUCache(maxsize=max_bytes, getsizeof=len)
        self._lock = threading.Lock()

    def snapshot(self) -> dict[str, str]:
        """The copies as they are now: a read names their attempts (`params`) and takes
        the texts it left out from this snapshot, whatever another thread evicts. Read
        from a copy of the cache: reading the cache itself would mark every text used."""
        with self._lock:
            return dict(copy.copy(self._texts))

    def keep(self, attempt_id: str, text: str) -> None:
        """Keep `text`, a success's result written by `attempt_id`, if it is large."""
        if len(text) < self._min_bytes or len(text) > self._max_bytes:
            return
        with self._lock:
            if attempt_id in self._texts:
                self._texts.get(attempt_id)  # a read marks it used
                return
            self._texts[attempt_id] = text  # older texts leave for its bytes
            while len(self._texts) > self._copies:
                self._texts.popitem()

    def used(self, attempt_id: str) -> None:
        with self._lock:
            self._texts.get(attempt_id)  # a read marks it used


COPIES_OF_THIS_PROCESS = ResultCopies()


def read_params(
    known: Mapping[str, str], task_ids: Iterable[str], per_task: str | None, **params: Any
) -> dict[str, Any]:
    """The parameters of a read of `task_ids`' rows (of `per_task`, one index's) that
    names the attempts of `known`."""
    return {
        **params,
        "task_ids": sorted(set(task_ids) - {per_task}),
        "per_task": per_task or "",
        "known_attempts": f",{','.join(known)}," if known else "",
    }


def fill_upstream(
    upstream: dict[str, Any],
    rows: Iterable[Any],
    *,
    mapped: frozenset[str],
    per_index: str | None,
    map_index: int,
    known: Mapping[str, str],
    copies: ResultCopies = COPIES_OF_THIS_PROCESS,
) -> None:
    """Each upstream's output from its TIs' rows (in map-index order): an unmapped task's
    result; a mapped task's successful indexes' results as a list (none: []); for the
    task `per_index` (mapped one to one), its index `map_index`'s result. A row whose
    result was left out takes its text from `known`, the snapshot the read named."""
    for task_id in mapped:
        upstream[task_id] = None if task_id == per_index else []
    for task_id, index, state, attempt_id, result in rows:
        text = result
        if state == TI.SUCCESS and attempt_id is not None:
            if text is None and attempt_id in known:
                text = known[attempt_id]
                copies.used(attempt_id)
                log.debug("result of %r (attempt %s) from this process's copy", task_id, attempt_id)
            elif text is not None:
                copies.keep(attempt_id, text)
        value = None if text is None else json.loads(text)
        if task_id == per_index:
            if index == map_index:
                upstream[task_id] = value
        elif task_id in mapped:
            if index >= 0 and state == TI.SUCCESS:
                upstream[task_id].append(value)
        else:
            upstream[task_id] = value
