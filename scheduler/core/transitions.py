"""The one place where TaskInstance and DagRun states are written.

Every write is a compare-and-set: `UPDATE … WHERE id IN (…) AND state IN
(expected) [AND attempt_id = …] RETURNING id`. A writer acting on a stale read
changes nothing and learns it lost. Each move is checked against the tables of
`scheduler.core.states` and stamps its timestamp. These functions never commit: the
caller owns the transaction.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from sqlalchemy import (
    BigInteger,
    ClauseElement,
    ColumnElement,
    String,
    Update,
    bindparam,
    case,
    func,
    update,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import Session

from sluice.scheduler.core.hot_sql import built, check_registered, name_of
from sluice.scheduler.core.models import DagRun, TaskInstance
from sluice.scheduler.core.queries.sql import expected_state
from sluice.scheduler.core.states import (
    TI,
    TI_PARKED,
    TI_TERMINAL,
    DagRunState,
    SpanStatus,
    TaskInstanceState,
    check_run_move,
    check_span_move,
    check_ti_move,
)
from sluice.scheduler.core.text import storable
from sluice.tasks.serialize import retry_delay_for

_CHUNK = 5000
"""Ids per UPDATE: below the bound-parameter limits of PostgreSQL and SQLite."""


def _ti_stamps(new: TaskInstanceState, now: dt.datetime) -> dict[str, Any]:
    if new is TI.SCHEDULED:
        return {"scheduled_at": now}
    if new is TI.QUEUED:
        return {"queued_at": now}
    if new is TI.RUNNING:
        return {"start_date": now, "last_heartbeat_at": now, "end_date": None}
    if new in TI_PARKED or new in TI_TERMINAL:  # a try, a poke, or a wait's start ended
        return {"end_date": now}
    if new is TI.NONE:  # a clear: a sensor's next try pokes afresh, a key is computed again
        return {
            "end_date": None,
            "next_retry_at": None,
            "error": None,
            "waiting": None,
            "concurrency_key": None,
        }
    return {}


def move_tis(
    session: Session,
    ids: Collection[int],
    new: TaskInstanceState,
    *,
    expect: Iterable[TaskInstanceState],
    now: dt.datetime,
    attempt_id: str | None = None,
    values: Mapping[str, Any] | None = None,
) -> list[int]:
    """Move the TIs `ids` that are in one of `expect` to `new`; return the ids that moved.

    With `attempt_id`, only the try holding that id moves (the worker's guard).
    """
    stmt, params = _prepared_move(new, expect, now, attempt_id, values, (), one=False)
    id_list = list(ids)
    moved: list[int] = []
    for start in range(0, len(id_list), _CHUNK):
        params["b_ids"] = id_list[start : start + _CHUNK]
        moved.extend(session.execute(stmt, params).scalars())
    return moved


def _prepared_move(
    new: TaskInstanceState,
    expect: Iterable[TaskInstanceState],
    now: dt.datetime,
    attempt_id: str | None,
    values: Mapping[str, Any] | None,
    returning: tuple[ColumnElement[Any], ...],
    *,
    one: bool,
) -> tuple[Update, dict[str, Any]]:
    """The checked move's statement and its parameters (all but the TI's id, `b_id`, or
    with `one=False` the ids, `b_ids`)."""
    expected = tuple(sorted(frozenset(expect)))
    for old in expected:
        check_ti_move(old, new)
    inline, keys, params = _split_values({**_ti_stamps(new, now), **(values or {})})
    stmt = _move_statement(new, expected, attempt_id is not None, inline, keys, returning, one)
    if attempt_id is not None:
        params["b_attempt"] = attempt_id
    return stmt, params


def ti_move_returning(
    ti_id: int,
    new: TaskInstanceState,
    *,
    expect: Iterable[TaskInstanceState],
    now: dt.datetime,
    returning: tuple[ColumnElement[Any], ...],
    attempt_id: str | None = None,
    values: Mapping[str, Any] | None = None,
    params: Mapping[str, Any] | None = None,
) -> tuple[Update, dict[str, Any]]:
    """The statement of `move_ti` for one TI that also returns `returning` of the moved
    row (none if it lost), and its parameters; `params` bind the parameters of
    `returning` (subqueries). `returning` must be a module-level constant: statements are
    cached by it. Not executed: the caller runs it or sends it with other statements
    (`scheduler.core.db.transaction_opened_by`, `executed_alone`)."""
    stmt, bound = _prepared_move(new, expect, now, attempt_id, values, returning, one=True)
    return stmt, {**(params or {}), **bound, "b_id": ti_id}


def _split_values(
    written: Mapping[str, Any],
) -> tuple[dict[str, Any], tuple[str, ...], dict[str, Any]]:
    """A move's written values as (SQL expressions to inline, the sorted keys of the plain
    values, those values as the parameters `v_<key>` of `_bound_values`)."""
    inline = {k: v for k, v in written.items() if isinstance(v, ClauseElement)}
    keys = tuple(sorted(k for k in written if k not in inline))
    return inline, keys, {f"v_{k}": written[k] for k in keys}


def _bound_values(table: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    """SET clauses binding `keys` of `table` to the parameters `v_<key>`, typed."""
    return {k: bindparam(f"v_{k}", type_=table.c[k].type) for k in keys}


def _move_statement(
    new: TaskInstanceState,
    expected: tuple[TaskInstanceState, ...],
    with_attempt: bool,
    inline: Mapping[str, Any],
    keys: tuple[str, ...],
    returning: tuple[ColumnElement[Any], ...],
    one: bool,
) -> Update:
    """The compare-and-set UPDATE for one kind of move (of one TI, or of a list). Plain
    values are bound, so the statement is built once per kind (`_cached_move`); a SQL
    expression among the values (`try_number + 1`) is inlined in a statement built for
    this call."""
    if not inline:
        return _cached_move(new, expected, with_attempt, keys, returning, one)
    return _build_move(new, expected, with_attempt, keys, returning, one).values(inline)


def _build_move(
    new: TaskInstanceState,
    expected: tuple[TaskInstanceState, ...],
    with_attempt: bool,
    keys: tuple[str, ...],
    returning: tuple[ColumnElement[Any], ...],
    one: bool,
) -> Update:
    table = TaskInstance.__table__
    stmt = (
        update(table)  # type: ignore[arg-type]
        .where(
            table.c.id == bindparam("b_id")
            if one
            else table.c.id.in_(bindparam("b_ids", expanding=True)),
            expected_state(table.c.state, [TI(state).value for state in expected]),
        )
        .values(state=TI(new).value, **_bound_values(table, keys))
        .returning(table.c.id, *returning)
    )
    if with_attempt:
        stmt = stmt.where(table.c.attempt_id == bindparam("b_attempt"))
    return stmt


@functools.lru_cache(maxsize=256)
def _cached_move(
    new: TaskInstanceState,
    expected: tuple[TaskInstanceState, ...],
    with_attempt: bool,
    keys: tuple[str, ...],
    returning: tuple[ColumnElement[Any], ...],
    one: bool,
) -> Update:
    """`_build_move` built once per kind of move (registered: pipelines send it)."""
    check_registered(returning, "a TI move's statement cache")
    stmt = _build_move(new, expected, with_attempt, keys, returning, one)
    states = "|".join(TI(state).value for state in expected)
    what = f"{'one' if one else 'many'}{', attempt' if with_attempt else ''}"
    returned = f" returning {name_of(returning)}" if returning else ""
    return built(f"ti move {states} -> {TI(new).value} ({what}; {','.join(keys)}){returned}", stmt)


def move_ti(
    session: Session,
    ti_id: int,
    new: TaskInstanceState,
    *,
    expect: Iterable[TaskInstanceState],
    now: dt.datetime,
    attempt_id: str | None = None,
    values: Mapping[str, Any] | None = None,
) -> bool:
    """`move_tis` for one TI; True if this writer won the move."""
    stmt, bound = _prepared_move(new, expect, now, attempt_id, values, (), one=True)
    bound["b_id"] = ti_id
    return session.execute(stmt, bound).first() is not None


def _run_stamps(new: DagRunState, now: dt.datetime) -> dict[str, Any]:
    if new is DagRunState.QUEUED:
        return {"queued_at": now, "end_date": None}
    if new is DagRunState.RUNNING:
        return {"start_date": now}
    return {"end_date": now}


def move_run(
    session: Session,
    run_id: int,
    new: DagRunState,
    *,
    expect: Iterable[DagRunState],
    now: dt.datetime,
    values: Mapping[str, Any] | None = None,
) -> bool:
    """Compare-and-set a DagRun's state; True if it moved. Loaded DagRun objects are
    not updated (no ORM synchronisation): callers read the outcome, not the object."""
    stmt, params = _run_move(new, expect, now, values, many=False)
    return session.execute(stmt, {**params, "b_run": run_id}).first() is not None


def move_runs(
    session: Session,
    run_ids: Collection[int],
    new: DagRunState,
    *,
    expect: Iterable[DagRunState],
    now: dt.datetime,
    values: Mapping[str, Any] | None = None,
) -> list[int]:
    """`move_run` for many runs with the same values, in one statement; the ids moved."""
    if not run_ids:
        return []
    stmt, params = _run_move(new, expect, now, values, many=True)
    return list(session.scalars(stmt, {**params, "b_runs": sorted(run_ids)}))


def _run_move(
    new: DagRunState,
    expect: Iterable[DagRunState],
    now: dt.datetime,
    values: Mapping[str, Any] | None,
    *,
    many: bool,
) -> tuple[Update, dict[str, Any]]:
    """A run move's checked UPDATE and its bound values (the runs' ids still to bind)."""
    expected = tuple(sorted(frozenset(expect)))
    for old in expected:
        check_run_move(old, new)
    inline, keys, params = _split_values({**_run_stamps(new, now), **(values or {})})
    stmt = _cached_run_move(new, expected, keys, many)
    if inline:
        stmt = stmt.values(inline)
    return stmt, params


@functools.lru_cache(maxsize=64)
def _cached_run_move(
    new: DagRunState, expected: tuple[DagRunState, ...], keys: tuple[str, ...], many: bool = False
) -> Update:
    """The compare-and-set UPDATE of one kind of run move, plain values bound: built once
    (building an ORM-enabled UPDATE cost more than running it)."""
    table = DagRun.__table__
    which = (
        table.c.id.in_(bindparam("b_runs", expanding=True))
        if many
        else table.c.id == bindparam("b_run")
    )
    return (
        update(table)  # type: ignore[arg-type]
        .where(
            which,
            expected_state(table.c.state, [DagRunState(s).value for s in expected]),
        )
        .values(state=DagRunState(new).value, **_bound_values(table, keys))
        .returning(table.c.id)
    )


def queue_tis(
    session: Session,
    assignments: Collection[tuple[int, str]],
    *,
    now: dt.datetime,
    job_id: int | None,
    decided: bool = False,
) -> None:
    """Move `(ti_id, new attempt_id)` pairs from scheduled to queued, bumping try_number.

    With `decided`, the TIs are in `none` and were just decided runnable by the caller
    (a worker's `scheduler.decide.downstream`): they pass through `scheduled` in this one write
    (both stamps set). Invariant: the caller holds the rows locked (`FOR UPDATE` in the
    same transaction, the run's lock for `decided`, or SQLite's single writer), so the
    guarded executemany cannot lose a race; the guard still keeps a stale caller from
    touching other states.
    """
    check_ti_move(TI.SCHEDULED, TI.QUEUED)
    if decided:
        check_ti_move(TI.NONE, TI.SCHEDULED)
    if not assignments:
        return
    if len(assignments) > 1 and session.get_bind().dialect.name == "postgresql":
        pairs = list(assignments)
        for start in range(0, len(pairs), _CHUNK):
            chunk = pairs[start : start + _CHUNK]
            ids, attempts = [i for i, _ in chunk], [a for _, a in chunk]
            bound = {"b_ids": ids, "b_attempts": attempts, "b_now": now, "b_job": job_id}
            session.execute(_queue_many_statement(decided), bound)
        return
    params = [{"b_id": i, "b_attempt": a, "b_now": now, "b_job": job_id} for i, a in assignments]
    session.execute(_queue_statement(decided), params)


@functools.lru_cache(maxsize=2)
def _queue_many_statement(decided: bool) -> Update:
    """`_queue_statement` for many TIs in one statement (PostgreSQL): `UPDATE … FROM
    unnest(ids, attempt ids)`, one plan and one pass instead of one statement per TI."""
    table = TaskInstance.__table__
    pairs = (
        func.unnest(
            bindparam("b_ids", type_=postgresql.ARRAY(BigInteger)),
            bindparam("b_attempts", type_=postgresql.ARRAY(String)),
        )
        .table_valued("id", "attempt")
        .render_derived(name="picked")
    )
    return _queueing(decided, attempt_id=pairs.c.attempt).where(table.c.id == pairs.c.id)


def queue_ti_if_statement(
    ti_id: int,
    attempt_id: str,
    *,
    now: dt.datetime,
    condition: ColumnElement[bool],
    params: Mapping[str, Any],
) -> tuple[Update, dict[str, Any]]:
    """`queue_tis(decided=True)` for one TI as a statement (not executed), made only if
    `condition` (a module-level constant, bound by `params`) holds in the same statement;
    it returns the TI's id if it was queued."""
    check_ti_move(TI.NONE, TI.SCHEDULED)
    check_ti_move(TI.SCHEDULED, TI.QUEUED)
    stmt = _queue_if_statement(condition)
    return stmt, {**params, "b_id": ti_id, "b_attempt": attempt_id, "b_now": now, "b_job": None}


@functools.lru_cache(maxsize=8)
def _queue_if_statement(condition: ColumnElement[bool]) -> Update:
    check_registered(condition, "the queue-if statement cache")
    stmt = _queue_statement(True).where(condition).returning(TaskInstance.__table__.c.id)
    return built(f"queue one decided TI if {name_of(condition)}", stmt)


def queue_picked_statement(
    attempt_id: str,
    *,
    now: dt.datetime,
    condition: ColumnElement[bool],
    params: Mapping[str, Any],
    returning: tuple[ColumnElement[Any], ...],
    decided: bool = False,
) -> tuple[Update, dict[str, Any]]:
    """A statement (not executed) and its parameters: the `scheduled` TI that `condition`
    picks moved to queued; with `decided`, the `none` TI it names, moved through
    `scheduled` in the same write (as `queue_ti_if_statement`, not by id).
    `condition` and `returning` are module-level constants (statements are cached)."""
    if decided:
        check_ti_move(TI.NONE, TI.SCHEDULED)
    check_ti_move(TI.SCHEDULED, TI.QUEUED)
    stmt = _queue_picked(condition, returning, decided)
    return stmt, {**params, "b_attempt": attempt_id, "b_now": now, "b_job": None}


@functools.lru_cache(maxsize=8)
def _queue_picked(
    condition: ColumnElement[bool], returning: tuple[ColumnElement[Any], ...], decided: bool
) -> Update:
    check_registered(condition, "the queue-picked statement cache")
    check_registered(returning, "the queue-picked statement cache")
    stmt = _queue_statement(decided, by_id=False).where(condition).returning(*returning)
    which = "a decided TI" if decided else "the TI"
    return built(f"queue {which} where {name_of(condition)} returning {name_of(returning)}", stmt)


def schedule_where_statement(
    *,
    now: dt.datetime,
    condition: ColumnElement[bool],
    params: Mapping[str, Any],
    returning: tuple[ColumnElement[Any], ...],
) -> tuple[Update, dict[str, Any]]:
    """The TIs still `none` that `condition` names moved to `scheduled` (stamped `b_now`),
    returning their ids and `returning`, with its parameters; not executed (a pipeline
    sends it). `condition` and `returning` are module-level constants (cached)."""
    check_ti_move(TI.NONE, TI.SCHEDULED)
    return _schedule_where(condition, returning), {**params, "b_now": now}


@functools.lru_cache(maxsize=8)
def _schedule_where(
    condition: ColumnElement[bool], returning: tuple[ColumnElement[Any], ...]
) -> Update:
    check_registered(condition, "the schedule-where statement cache")
    check_registered(returning, "the schedule-where statement cache")
    table = TaskInstance.__table__
    stmt = (
        update(table)  # type: ignore[arg-type]
        .where(expected_state(table.c.state, [TI.NONE.value]), condition)
        .values(
            state=TI.SCHEDULED.value,
            scheduled_at=bindparam("b_now", type_=table.c.scheduled_at.type),
        )
        .returning(table.c.id, *returning)
    )
    return built(f"schedule where {name_of(condition)} returning {name_of(returning)}", stmt)


def queue_ranked_statement(
    attempt_ids: list[str],
    *,
    now: dt.datetime,
    condition: ColumnElement[bool],
    rank: ColumnElement[Any],
    params: Mapping[str, Any],
    returning: tuple[ColumnElement[Any], ...],
) -> tuple[Update, dict[str, Any]]:
    """The `none` TIs `condition` picks moved to queued (through `scheduled`, as
    `queue_ti_if`), each with the attempt id of its `rank` (1 to len(attempt_ids)) among
    them; returning `returning`. Not executed. `condition`, `rank` and `returning` are
    module-level constants (statements are cached by them and the count)."""
    check_ti_move(TI.NONE, TI.SCHEDULED)
    check_ti_move(TI.SCHEDULED, TI.QUEUED)
    stmt = _queue_ranked(condition, rank, returning, len(attempt_ids))
    attempts = {f"b_attempt_{i}": attempt for i, attempt in enumerate(attempt_ids, 1)}
    return stmt, {**params, **attempts, "b_now": now, "b_job": None}


@functools.lru_cache(maxsize=32)
def _queue_ranked(
    condition: ColumnElement[bool],
    rank: ColumnElement[Any],
    returning: tuple[ColumnElement[Any], ...],
    count: int,
) -> Update:
    for part in (condition, rank, returning):
        check_registered(part, "the queue-ranked statement cache")
    attempt = case({i: bindparam(f"b_attempt_{i}") for i in range(1, count + 1)}, value=rank)
    stmt = _queueing(True, attempt_id=attempt).where(condition).returning(*returning)
    name = f"queue decided TIs where {name_of(condition)} returning {name_of(returning)}"
    return built(f"{name} ({count} attempts)", stmt)


@functools.lru_cache(maxsize=4)
def _queue_statement(decided: bool, by_id: bool = True) -> Update:
    stmt = _queueing(decided, attempt_id=bindparam("b_attempt"))
    return stmt.where(TaskInstance.__table__.c.id == bindparam("b_id")) if by_id else stmt


def _queueing(decided: bool, *, attempt_id: ColumnElement[Any]) -> Update:
    """The queueing UPDATE of TIs still `none` (`decided`) or `scheduled`, which rows
    left to the caller's WHERE: what it writes is `_queued_values`."""
    table = TaskInstance.__table__
    return (
        update(table)  # type: ignore[arg-type]
        .where(expected_state(table.c.state, [(TI.NONE if decided else TI.SCHEDULED).value]))
        .values(_queued_values(decided, attempt_id=attempt_id))
    )


def _queued_values(decided: bool, *, attempt_id: ColumnElement[Any]) -> dict[str, Any]:
    """What queueing writes: the new try (`attempt_id`, try_number + 1), the stamps at
    `b_now` (`scheduled_at` too when `decided`), the queueing job `b_job`."""
    table = TaskInstance.__table__
    now = bindparam("b_now", type_=table.c.queued_at.type)
    stamps: dict[str, Any] = {"queued_at": now}
    if decided:
        stamps["scheduled_at"] = now
    return {
        "state": TI.QUEUED.value,
        "attempt_id": attempt_id,
        "try_number": table.c.try_number + 1,
        "queued_by_job_id": bindparam("b_job", type_=table.c.queued_by_job_id.type),
        "hostname": None,
        "pid": None,
        **stamps,
    }


def move_spans(
    session: Session,
    model: type[DagRun] | type[TaskInstance],
    ids: Collection[int],
    new: SpanStatus,
    *,
    expect: Iterable[SpanStatus],
    values: Mapping[str, Any] | None = None,
) -> list[int]:
    """Compare-and-set the `span_status` of DagRuns or TaskInstances; return the ids moved."""
    expected = frozenset(expect)
    for old in expected:
        check_span_move(old, new)
    if not ids:
        return []
    stmt = (
        update(model)
        .where(model.id.in_(list(ids)), model.span_status.in_(list(expected)))
        .values(span_status=new, **(values or {}))
        .returning(model.id)
        .execution_options(synchronize_session=False)
    )
    return list(session.scalars(stmt))


ERROR_MAX_CHARS = 2000
"""Longest error line stored on a TaskInstance."""


def short_error(error: str) -> str:
    """`error` as storable text (`text.storable`), cut to ERROR_MAX_CHARS."""
    error = storable(error)
    return error if len(error) <= ERROR_MAX_CHARS else error[: ERROR_MAX_CHARS - 3] + "..."


def fail_try(
    session: Session,
    ti: TaskInstance,
    task_spec: Mapping[str, Any] | None,
    now: dt.datetime,
    error: str,
    *,
    expect: TaskInstanceState = TI.RUNNING,
) -> TaskInstanceState | None:
    """`expect` (running, or queued for a `queued_timeout`) -> up_for_retry (tries left
    and a known task) or failed, on `ti`'s attempt.

    The retry waits `retry_delay_for` the task. Returns the state written, None if
    the compare-and-set lost (the try moved meanwhile).
    """

    values: dict[str, Any] = {"error": short_error(error), "next_retry_at": None}
    new = TI.FAILED
    if task_spec is not None and ti.try_number < ti.max_tries:
        new = TI.UP_FOR_RETRY
        values["next_retry_at"] = now + retry_delay_for(dict(task_spec), ti.try_number)
    won = move_ti(
        session, ti.id, new, expect=[expect], now=now, attempt_id=ti.attempt_id, values=values
    )
    return new if won else None
