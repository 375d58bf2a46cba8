"""DagRun logic: creating a run, keeping it in step with its DAG, and moving it on.

Every function takes the caller's session and never commits. `update_state`
must be called with the run's row locked (claimed `FOR NO KEY UPDATE SKIP LOCKED`, or
SQLite's single writer): all of one run's scheduling decisions are made in
that one transaction.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import bindparam, case, select, update
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from sluice.scheduler.core.callback_kinds import mask_of
from sluice.scheduler.core.db import as_utc, executed
from sluice.scheduler.core.hot_sql import hot
from sluice.scheduler.core.models import Dag, DagRun, TaskInstance
from sluice.scheduler.core.named_sql import hot_statement, same_values
from sluice.scheduler.core.states import TI, DagRunState, RunType
from sluice.scheduler.core.tracing_ids import new_carrier
from sluice.scheduler.core.transitions import move_run, move_tis
from sluice.scheduler.core.upsert import insert_unless_clash
from sluice.scheduler.decide.decisions import Decisions, TiView
from sluice.scheduler.decide.deps import results_that_decide, run_outcome
from sluice.scheduler.scheduling.expanding import write_expansion
from sluice.scheduler.scheduling.run_decision import decide_run
from sluice.scheduler.scheduling.ti_rows import insert_tis
from sluice.scheduler.scheduling.timeouts import fail_queued_past_timeout
from sluice.tasks import run_ids
from sluice.tasks.mapping import DEFAULT_MAX_MAP_LENGTH
from sluice.tasks.params import resolve_params

_TIS = TaskInstance.__table__.c
_RUNS = DagRun.__table__
_RUN_TIS_ON_SQLITE = hot(
    "run's TIs to decide (SQLite)",
    select(
        _TIS.id,
        _TIS.task_id,
        _TIS.state,
        _TIS.next_retry_at,
        case(
            (_TIS.task_id.in_(bindparam("read_results", expanding=True)), _TIS.result),
            else_=None,
        ).label("result"),
        _TIS.map_index,
    ).where(_TIS.dag_run_id == bindparam("run_pk")),
    twin=True,
)
RUN_TIS_TO_DECIDE = hot_statement("run_tis_to_decide", same_values(_RUN_TIS_ON_SQLITE))
"""scheduler/core/sql/scheduling.sql: every TI of a run, the results that decide."""
_STAMP_DECISION = (
    update(_RUNS)  # type: ignore[arg-type]
    .where(_RUNS.c.id == bindparam("b_run"))
    .values(
        last_scheduling_decision=bindparam("b_now", type_=_RUNS.c.last_scheduling_decision.type)
    )
)
"""`update_state`'s statements, built once (building one cost as much as running it)."""


class RunExists(ValueError):
    """A run with this run_id or logical date already exists for the DAG."""


RUN_ID_MAX = run_ids.RUN_ID_MAX
"""Longest run id (the column's length)."""


def check_run_id(run_id: str) -> str:
    """`run_id` if a user may give it to a run, else a ValueError saying why
    (`tasks.run_ids.run_id_problem`: not empty, no leading or trailing spaces, no '/'
    (the API names a run in a URL path, so such a run could not be read or cleared there;
    Airflow restricts run ids the same way), no NUL, valid UTF-8, at most RUN_ID_MAX
    characters)."""
    problem = run_ids.run_id_problem(run_id)
    if problem is not None:
        raise ValueError(problem)
    return run_id


def run_id_for(run_type: RunType, logical_date: dt.datetime) -> str:
    return f"{run_type.value}__{logical_date.isoformat()}"


def deadline_of(spec: dict[str, Any], queued_at: dt.datetime) -> dt.datetime | None:
    """When a run queued at `queued_at` misses its DAG's `deadline` (None: no deadline or
    no `on_deadline_missed` to call)."""
    deadline = spec.get("deadline")
    if deadline is None or "on_deadline_missed" not in (spec.get("callbacks") or ()):
        return None
    return queued_at + dt.timedelta(seconds=float(deadline))


def create_dagrun(
    session: Session,
    dag: Dag,
    *,
    run_type: RunType,
    logical_date: dt.datetime,
    now: dt.datetime,
    run_id: str | None = None,
    conf: dict[str, Any] | None = None,
    claimed_by_job_id: int | None = None,
    triggering_events: list[dict[str, Any]] | None = None,
) -> DagRun:
    """Insert a queued run and one TI (state `none`) per task; raise RunExists on a clash
    (a run of the DAG with that run id or logical date), having written nothing.

    The conf is kept as given, once its DAG's params accept it (`tasks.params.
    resolve_params`): `ParamsError`, one line, raised before anything is written, for a
    param it gives that does not fit, or a param without default it does not give. A
    conf that names no param, for a DAG whose params all have defaults (a scheduled
    DAG's, always), costs no check.

    The run's INSERT skips a clash itself (`insert_unless_clash`): a run created costs no
    read first, and only a clash reads which run it met."""
    resolve_params(dag.serialized.get("params"), conf or {})
    run_id = run_id or run_id_for(run_type, logical_date)
    run = insert_unless_clash(
        session,
        DagRun,
        {
            "dag_id": dag.dag_id,
            "run_id": run_id,
            "logical_date": logical_date,
            "run_type": run_type,
            "state": DagRunState.QUEUED,
            "conf": conf or {},
            "dag_hash": dag.version_hash,
            "queued_at": now,
            "claimed_by_job_id": claimed_by_job_id,
            "context_carrier": new_carrier(),
            "callback_mask": mask_of(dag.serialized.get("callbacks") or ()),
            "deadline_at": deadline_of(dag.serialized, now),
            "bundle_version": dag.bundle_version,  # a git bundle's: the run keeps its commit
            "dag_version_id": dag.version_id,
            "triggering_events": triggering_events,
        },
    )
    if run is None:
        clash = session.scalar(
            select(DagRun.run_id).where(
                DagRun.dag_id == dag.dag_id,
                (DagRun.run_id == run_id) | (DagRun.logical_date == logical_date),
            )
        )
        raise RunExists(f"DAG {dag.dag_id!r} already has a run {clash!r} for that run id or date")
    insert_tis(session, run, dag, list(dag.serialized["tasks"]))
    return run


def verify_integrity(session: Session, run: DagRun, dag: Dag, now: dt.datetime) -> None:
    """Bring the run's TIs in step with the DAG's current tasks.

    New tasks get TIs; TIs of vanished tasks become `removed` (a message already
    queued for one then loses its compare-and-set); a task that comes back has its
    TIs reset to `none` (a mapped task's indexes all removed: it expands again).
    """
    tasks = dag.serialized["tasks"]
    rows = session.execute(
        select(TaskInstance.id, TaskInstance.task_id, TaskInstance.state).where(
            TaskInstance.dag_run_id == run.id
        )
    ).all()
    have: dict[str, list[tuple[int, str]]] = {}
    for ti_id, task_id, state in rows:
        have.setdefault(task_id, []).append((ti_id, state))
    vanished = [
        ti_id for task_id, found in have.items() if task_id not in tasks for ti_id, _ in found
    ]
    move_tis(
        session,
        vanished,
        TI.REMOVED,
        expect=[s for s in TI if s not in (TI.REMOVED, TI.RUNNING)],
        now=now,
    )
    back = [
        ti_id
        for task_id, found in have.items()
        if task_id in tasks and all(state == TI.REMOVED for _, state in found)
        for ti_id, _ in found
    ]
    move_tis(session, back, TI.NONE, expect=[TI.REMOVED], now=now)
    insert_tis(session, run, dag, [t for t in tasks if t not in have])
    session.execute(update(DagRun).where(DagRun.id == run.id).values(dag_hash=dag.version_hash))
    set_committed_value(run, "dag_hash", dag.version_hash)  # written above; not dirty


@dataclass
class RunDecision:
    """What one `update_state` call did."""

    scheduled: list[int] = field(default_factory=list)
    skipped: int = 0
    upstream_failed: int = 0
    finished: DagRunState | None = None
    stop: list[str] = field(default_factory=list)
    """Attempts of tries failed past their `queued_timeout`, to revoke after the commit."""
    expansions: int = 0
    """Mapped tasks given their indexes (an expansion, or a one-to-one task following)."""
    indexes: int = 0
    """The indexes those expansions asked for."""


def update_state(
    session: Session,
    run: DagRun,
    dag: Dag,
    now: dt.datetime,
    *,
    max_map_length: int = DEFAULT_MAX_MAP_LENGTH,
) -> RunDecision:
    """Decide the run's TIs from one query and write the moves; end the run if it is done.
    A mapped task expanded on the way is decided again at once (one more query), so
    what follows its indexes one by one gets its own indexes in the same transaction.

    A run only moves forward to its DAG's current stored version, and ends only in step
    with it. `dag` may be a copy cached a little before a new version was stored (a folder
    sync in between): a run whose version is not `dag`'s is brought in step with the
    stored version (`verify_integrity`: new tasks created, vanished ones removed), never
    back to an older copy; and before the run ends the stored version is read again, and
    if it changed, the run is brought in step and decided again from it, in this
    transaction. That read is one query a run, at its end.

    A run of a git bundle's DAG (`bundle_version`) follows the version it was created
    with: `dag` is that version (`SerializedDagCache.get` of the run's hash), and no
    newer one is ever read here (`tasks clear --latest-version` moves it, `clearing`).

    Invariant: the run row is locked by the caller's transaction.
    """
    pinned = run.bundle_version is not None and run.dag_hash == dag.version_hash
    if run.dag_hash != dag.version_hash:
        dag = _stored_dag(session, run, dag)
        if run.dag_hash != dag.version_hash:
            verify_integrity(session, run, dag, now)
    outcome = RunDecision()
    moved, end = _decide(session, run, dag, now, outcome, max_map_length)
    if end is not None and not pinned:
        current = _newer_version(session, run)
        if current is not None:
            verify_integrity(session, run, current, now)
            again, end = _decide(session, run, current, now, outcome, max_map_length)
            moved.update(again)
    values = {"last_scheduling_decision": now}
    if end is not None:
        final = DagRunState.SUCCESS if end is TI.SUCCESS else DagRunState.FAILED
        if move_run(session, run.id, final, expect=[DagRunState.RUNNING], now=now, values=values):
            outcome.finished = final
            return outcome
    last = run.last_scheduling_decision
    if moved or outcome.expansions or last is None or (now - last).total_seconds() >= 1.0:
        # the stamp orders the claim (oldest first, so no run starves); rewriting it
        # when nothing moved is needed at most once a second
        session.execute(_STAMP_DECISION, {"b_run": run.id, "b_now": now})
        set_committed_value(run, "last_scheduling_decision", now)  # written; not dirty
    return outcome


def _decide(
    session: Session,
    run: DagRun,
    dag: Dag,
    now: dt.datetime,
    outcome: RunDecision,
    max_map_length: int,
) -> tuple[dict[int, TI], TI | None]:
    """Decide and write the run's TIs from `dag` (up to `_ROUNDS` reads, an expansion
    asking for another); the TIs moved and the run's end (None: not over), added to
    `outcome`."""
    moved: dict[int, TI] = {}
    for round_ in range(_ROUNDS):
        tis = _read_tis(session, run, dag)
        if round_ == 0:
            tis, stop = fail_queued_past_timeout(session, dag.serialized, tis, now)
            outcome.stop += stop
        decisions = decide_run(
            dag.serialized, dag.version_hash, tis, now, max_map_length=max_map_length
        )
        for expansion in decisions.expansions:
            outcome.scheduled += write_expansion(session, run, dag, expansion, now)
            outcome.expansions += 1
            outcome.indexes += len(expansion.indexes)
        moved.update(_write_moves(session, decisions, outcome, now))
        if not decisions.expansions:
            return moved, run_outcome(dag.serialized, tis, moved)
    return moved, None  # after an expansion in the last round the TIs read are stale


def _stored_dag(session: Session, run: DagRun, dag: Dag) -> Dag:
    """The DAG's stored row for a run whose version is not the copy `dag`'s: `dag` when
    it is the stored version (the run follows an older one), else the stored row (the
    copy is older than the run, or than the stored version)."""
    stored = session.execute(_STORED_VERSION, {"dag_id": run.dag_id}).scalar()
    if stored is None or stored == dag.version_hash:
        return dag
    return session.scalars(select(Dag).where(Dag.dag_id == run.dag_id)).one_or_none() or dag


def _newer_version(session: Session, run: DagRun) -> Dag | None:
    """The DAG's stored row if its version is not the one the run's TIs follow (a sync
    stored a newer one since the caller's copy was read); None when it is the same, or
    the DAG's row is gone. Read after the run's TIs, so a TI that a worker moved from the
    newer version (a task `removed`) is seen with that version."""
    stored = session.execute(_STORED_VERSION, {"dag_id": run.dag_id}).scalar()
    if stored is None or stored == run.dag_hash:
        return None
    return session.scalars(select(Dag).where(Dag.dag_id == run.dag_id)).one_or_none()


_STORED_VERSION = select(Dag.version_hash).where(Dag.dag_id == bindparam("dag_id"))
"""The DAG's stored version, read where a run would end (`_newer_version`)."""


_ROUNDS = 4
"""Decisions of one run in one call at most: an expansion asks for one more (a chain of
one-to-one mapped tasks gets its indexes one task per round; the rest next pass)."""


def _read_tis(session: Session, run: DagRun, dag: Dag) -> list[TiView]:
    deciding = results_that_decide(dag.serialized, dag.version_hash)
    params = {"run_pk": run.id, "read_results": list(deciding)}
    return [
        TiView(
            id=r.id,
            task_id=r.task_id,
            state=TI(r.state),
            next_retry_at=as_utc(r.next_retry_at),
            result=r.result,
            map_index=r.map_index,
        )
        for r in executed(session, (RUN_TIS_TO_DECIDE, params))
    ]


def _write_moves(
    session: Session, decisions: Decisions, outcome: RunDecision, now: dt.datetime
) -> dict[int, TI]:
    """Write the decided moves (each a compare-and-set from `none`, or `up_for_retry` /
    `up_for_reschedule` for a retry or a sensor's next poke); the TIs that moved and where
    to."""
    moved: dict[int, TI] = {}
    retries = set(decisions.retries)
    for new, ids in decisions.moves.items():
        fresh = [i for i in ids if i not in retries]
        if new is TI.FAILED:
            won = [
                ti_id
                for ti_id in fresh
                if move_tis(
                    session,
                    [ti_id],
                    new,
                    expect=[TI.NONE],
                    now=now,
                    values={"error": decisions.errors.get(ti_id)},
                )
            ]
        else:
            won = move_tis(session, fresh, new, expect=[TI.NONE], now=now)
        if new is TI.SCHEDULED:
            won += move_tis(session, decisions.retries, new, expect=[TI.UP_FOR_RETRY], now=now)
            won += move_tis(  # a poke is no new try: queueing adds back the 1 taken here
                session,
                decisions.retries,
                new,
                expect=[TI.UP_FOR_RESCHEDULE],
                now=now,
                values={"try_number": TaskInstance.try_number - 1},
            )
            outcome.scheduled += won
        elif new is TI.SKIPPED:
            outcome.skipped += len(won)
        elif new is TI.UPSTREAM_FAILED:
            outcome.upstream_failed += len(won)
        moved.update((i, new) for i in won)
    return moved
