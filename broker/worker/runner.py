"""Run one TaskInstance try on a worker: claim, run, heartbeat, record, then queue the
direct downstream (`scheduler.decide.downstream`) or wake the schedulers.

Invariants:
- Every state write is a compare-and-set on (`ti_id`, expected state, `attempt_id`)
  through `scheduler.core.transitions.move_ti`, each in its own short transaction. A
  message whose claim loses (duplicate, stale, cleared or removed TI) changes
  nothing and is `stale`; a result whose write loses (the TI was cleared or swept
  while running) is dropped and is `stale` too.
- The claim is one statement (autocommit on PostgreSQL). The result is recorded by the
  one path of `broker.worker.result.PATHS` that applies (`choose`): the result, the
  try's log and the downstream decision in one transaction, the run's row locked first;
  or, for a quiet success, in one query, what else follows after it. What a result
  queued is published after its commit (`_follow_up`).
- No transaction is open while the task's code runs.
- Only `Exception` and `TaskTimeout` (a `BaseException`, so that a task's own
  `except Exception` cannot swallow it) are task failures: `SystemExit`/`KeyboardInterrupt`
  (a worker shutdown) propagate and leave the TI `running` for the heartbeat sweep.
- A try still running `timeout_grace` seconds after its `execution_timeout` (its code
  swallowed the timeout) is recorded `up_for_retry` or `failed`, `(killed)`, by the
  process's deadlines thread, with the same compare-and-set as any result, and ended:
  its prefork pool process is killed and replaced; elsewhere its thread is abandoned
  (`broker.worker.time_limits`). Exactly one of that record and the try's own is made.
- A CeleryTask try is DEFERRED: its external Celery task is sent (through the Celery app
  of the running Sluice task), its id is written on the TI with the same guard, and the TI
  stays `running` for `scheduler.jobs.celery_poller` to finish. Sent before it is recorded: a
  worker dying in between leaves an orphan external task and a try the heartbeat sweep
  retries (at least once); a record that loses revokes the external task.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import logging
import time
import traceback
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from celery import current_task
from sqlalchemy import Update, and_, bindparam, select, update
from sqlalchemy.orm import Session, sessionmaker

from sluice.broker.app import create_app
from sluice.broker.trace_headers import HeadersLast, carrying
from sluice.broker.worker.concurrency_slots import Slot, hold_slot
from sluice.broker.worker.conf_secrets import mask_conf_secrets
from sluice.broker.worker.context import WorkerContext
from sluice.broker.worker.dag_files import local_file
from sluice.broker.worker.heartbeat import FENCED, Heartbeat
from sluice.broker.worker.masked_results import keep_masked_result
from sluice.broker.worker.result import Case, decision, record_result
from sluice.broker.worker.retrying import retrying
from sluice.broker.worker.secret_reads import use_worker_secrets
from sluice.broker.worker.task_env import masked_error
from sluice.broker.worker.task_logs import TaskLogCapture, capture_task_log, current_capture
from sluice.broker.worker.time_limits import Ending, deadlines, hard_limit
from sluice.broker.worker.upstream_results import (
    COPIES_OF_THIS_PROCESS,
    UPSTREAM_OF_TI,
    UPSTREAM_RESULTS,
    fill_upstream,
    read_params,
)
from sluice.scheduler.core.dag_cache import SerializedDagCache
from sluice.scheduler.core.db import (
    Pipeline,
    Sent,
    committed_at_once,
    executed,
    executed_alone,
    single_statement_factory,
    transaction,
    utcnow,
)
from sluice.scheduler.core.hot_sql import built, check_registered, hot, name_of
from sluice.scheduler.core.messages import RunMessage
from sluice.scheduler.core.models import Dag, DagRun, TaskInstance
from sluice.scheduler.core.named_sql import hot_statement, same_values
from sluice.scheduler.core.queries.assets import NewEvent
from sluice.scheduler.core.queries.run_states import run_states
from sluice.scheduler.core.queries.sql import unindexed
from sluice.scheduler.core.queries.task_logs import LogSnapshot, save_task_log
from sluice.scheduler.core.queries.triggers import add_trigger, trigger_event_of
from sluice.scheduler.core.run_dates import run_dates
from sluice.scheduler.core.settings import Settings
from sluice.scheduler.core.states import TI, RunType
from sluice.scheduler.core.text import storable
from sluice.scheduler.core.transitions import move_ti, short_error, ti_move_returning
from sluice.scheduler.decide.downstream import FollowUp
from sluice.scheduler.decide.plans import arguments_upstream
from sluice.tasks.assets import OutletEvents, check_extras
from sluice.tasks.celery_task import CeleryTask
from sluice.tasks.errors import Skip, TaskStopped, TaskTimeout
from sluice.tasks.external_sensor import RUN_STATES, ExternalTaskSensor, RunStates
from sluice.tasks.limits import Concurrency, concurrency_key
from sluice.tasks.mapping import check_map_output, per_index_of
from sluice.tasks.params import param_values
from sluice.tasks.runtime import Stop, branch_targets, check_result, run_task, wants_context
from sluice.tasks.sensor import Reschedule, SensorTimeout, Waiting, sense
from sluice.tasks.serialize import retry_delay_for
from sluice.tasks.task import ShellTask, Task
from sluice.tasks.triggers import TaskDeferred

log = logging.getLogger(__name__)


class Outcome(StrEnum):
    STALE = "stale"
    SUCCESS = "success"
    FAILED = "failed"
    UP_FOR_RETRY = "up_for_retry"
    UP_FOR_RESCHEDULE = "up_for_reschedule"
    """A reschedule-mode sensor's poke found nothing; it pokes again later."""
    WAITING_ON_TRIGGER = "waiting on a trigger"
    """The task deferred (`sluice.defer`): a triggerer resumes it."""
    SKIPPED = "skipped"
    REMOVED = "removed"
    """The task is in neither the DAG file nor the DAG's stored version (`_stored_has`)."""
    WAITING_FOR_A_SLOT = "waiting for a slot"
    """Every slot of the task's concurrency key is held: the TI waits in `scheduled`."""
    DEFERRED = "deferred"
    """A CeleryTask's external task was sent; the TI stays running (see the module doc)."""
    FENCED = "fenced"
    """Stopped for being out of the database's reach (`heartbeat.FENCED`): nothing is
    recorded; the schedulers' sweep moves the TI on, as for a dead worker."""


@dataclass(frozen=True)
class Claimed:
    """What the claim transaction read: everything the run needs, no open session."""

    run_pk: int
    fileloc: str | None
    spec: dict[str, Any] | None
    dag: Dag | None
    """The cached DAG row the task was run from (None when run from a local spec)."""
    pool: str
    try_number: int
    max_tries: int
    context: dict[str, Any]
    run_claimed: bool
    """The run was claimed by a job (a backfill) at the claim: its news is broadcast."""
    map_index: int = -1
    mapped_upstream: frozenset[str] = frozenset()
    """The upstream tasks that are mapped: each gives the list of its indexes' results."""
    per_index: str | None = None
    """The mapped upstream this task maps one to one: it gives its index `map_index`'s result."""
    pre_read: PreRead | None = None
    """The upstream results read with the claim (for the upstream ids it names)."""
    bundle_version: str | None = None
    """The commit of a git bundle's run: its code comes from that commit's checkout."""
    waiting: Any = None
    """The TI's `waiting` as claimed: a sensor's state between pokes, or what a resumed
    try's trigger fired with (`tasks.triggers`); None for any other try."""
    dag_spec: Mapping[str, Any] = field(default_factory=dict)
    """The serialized DAG of the run's version: its params' defaults and its schedule
    give `context["params"]` and the data interval (`_read_for_context`)."""


@dataclass(frozen=True)
class PreRead:
    """Upstream results read in the claim's query: of `task_ids`, its rows (the results
    left out taken from `known`, the copies the read named)."""

    task_ids: tuple[str, ...]
    per_index: str | None
    rows: list[Any]
    known: dict[str, str]


def _upstream_read_with_claim(msg: RunMessage) -> tuple[tuple[str, ...], str | None] | None:
    """The upstream task ids to read with the claim of `msg`, and the one its task maps
    one to one: those of its task, if its arguments take upstream results in the DAG
    version this process read last (a guess: `_read_for_context` reads them again if the
    claimed version's differ); else None."""
    dag = _DAGS.latest(msg.dag_id)
    if dag is None or not dag.serialized:
        return None
    upstream_ids = arguments_upstream(dag, msg.task_id)
    if upstream_ids is None:
        return None
    return upstream_ids, per_index_of(dag.serialized["tasks"][msg.task_id])


def run_task_instance(ctx: WorkerContext, msg: RunMessage) -> Outcome:
    """Claim, run and record one try of `msg.ti_id`; then publish the downstream TIs the
    result queued, and wake the schedulers for what it left to them."""
    claimed = claim(ctx, msg)
    if claimed is None:
        log.info("stale message for %s: ignored", _what(msg))
        return Outcome.STALE
    log.debug("running %s, try %s", _what(msg), claimed.try_number)  # Celery logs the receipt
    deadlines()  # the process's deadlines thread starts out of the try's log capture
    stop = Stop()
    heartbeat = Heartbeat(
        ctx.session_factory,
        ctx.settings.heartbeat_interval,
        msg.ti_id,
        msg.attempt_id,
        on_lost=stop.stop,
        fence_after=ctx.settings.fence_after,
    )
    use_worker_secrets(ctx)  # Connection.get, Variable.get: read only if the task asks
    with heartbeat:  # until the result is written: a try waiting on a lock is not lost
        with capture_task_log(ctx, msg, claimed.try_number) as captured:
            new, values = _execute(ctx, msg, claimed, stop, captured)
        if isinstance(values, FencedBody):  # out of the database's reach: the sweep takes it over
            return Outcome.FENCED
        values = masked_error(ctx.settings, values, captured.mask)  # and its secrets: ***
        if new is TI.RUNNING:
            return _defer(ctx, msg, values["external_id"], captured.final_snapshot())
        if new is TI.DEFERRED:
            trigger = values["trigger"]
            return _wait_on_trigger(ctx, msg, claimed, trigger, captured.final_snapshot())
        if new is TI.SCHEDULED:  # given back: its key's slots are all held (or the TI lost)
            given_back = values["slot"] is Slot.GIVEN_BACK
            return Outcome.WAITING_FOR_A_SLOT if given_back else Outcome.STALE
        result, mask = values.get("result"), captured.mask
        keep_masked_result(ctx.session_factory, msg.ti_id, claimed.try_number, result, mask)
        outcome, follow = _record(ctx, msg, claimed, new, values, captured.final_snapshot())
    if outcome is not Outcome.STALE:
        _follow_up(ctx, claimed, follow)
    return outcome


def _follow_up(ctx: WorkerContext, claimed: Claimed, follow: FollowUp | None) -> None:
    """After the result's commit: publish what it queued, wake the schedulers if needed.

    A failed publish leaves the TIs queued; the schedulers' queued sweep re-publishes.
    """
    if follow is not None and follow.messages and ctx.publish is not None:
        try:
            ctx.publish(follow.messages)
        except Exception as exc:
            log.warning("publishing %d downstream tasks failed: %s", len(follow.messages), exc)
    keyed = claimed.spec is not None and "concurrency" in claimed.spec  # a slot freed
    if follow is None or follow.wake or keyed:
        ctx.waker.wake(claimed.run_pk, shared=not claimed.run_claimed)


def _what(msg: RunMessage) -> str:
    return f"{msg.dag_id}.{msg.run_id}.{msg.task_id} (ti {msg.ti_id}, attempt {msg.attempt_id})"


def claim(ctx: WorkerContext, msg: RunMessage) -> Claimed | None:
    """queued -> running for this attempt: one UPDATE ... RETURNING the run's context.
    A task whose arguments take upstream results (as the DAG version this process last
    read says: `_upstream_read_with_claim`) has them read in the same query, after the
    UPDATE; others read them later, only if they take the context.

    None if the claim lost: nothing was changed. A dropped database connection is
    retried (the claim is a compare-and-set, so a retry cannot claim twice).
    """
    spec_of = getattr(ctx.dags, "get_spec", None)
    pre = None if spec_of is not None else _upstream_read_with_claim(msg)

    def attempt() -> Claimed | None:
        move = claim_statement(msg, ctx.hostname, ctx.pid, utcnow())
        pre_read: PreRead | None = None
        if pre is None:
            # one atomic UPDATE ... RETURNING: no transaction around it on PostgreSQL
            rows = executed_alone(ctx.session_factory, move)
        else:
            upstream_ids, per_index = pre
            pipeline = Pipeline()
            claimed = pipeline.add(move, "claim")
            known = COPIES_OF_THIS_PROCESS.snapshot()
            params = read_params(known, upstream_ids, per_index, ti_id=msg.ti_id)
            read = pipeline.add((UPSTREAM_OF_TI, params), "upstream results")
            sent = committed_at_once(ctx.session_factory, pipeline)
            rows = sent[claimed]
            pre_read = PreRead(upstream_ids, per_index, list(sent[read]), known)
        if not rows:
            return None
        row = rows[0]._replace(logical_date=rows[0].logical_date.astimezone(dt.UTC))
        context = _read_context(_dag_reader(ctx.session_factory), msg, row, spec_of)
        return replace(context, pre_read=pre_read)

    return retrying(attempt)


_DAGS = SerializedDagCache()
"""This process's serialized DAGs, re-read only when their version hash changes."""


_TI = TaskInstance.__table__
_RUN = DagRun.__table__
_DAG = Dag.__table__


def _of_run(column: Any) -> Any:
    return select(column).where(_RUN.c.id == _TI.c.dag_run_id).scalar_subquery()


_CLAIMED = hot(
    "claimed TI's context",
    (
        _TI.c.dag_id,
        _TI.c.run_id,
        _TI.c.task_id,
        _TI.c.try_number,
        _TI.c.max_tries,
        _TI.c.pool,
        _TI.c.map_index,
        _TI.c.waiting,
        _TI.c.dag_run_id.label("run_pk"),
        _of_run(_RUN.c.logical_date).label("logical_date"),
        _of_run(_RUN.c.dag_hash).label("dag_hash"),
        _of_run(_RUN.c.claimed_by_job_id).label("claimed_by_job_id"),
        _of_run(_RUN.c.bundle_version).label("bundle_version"),
        select(_DAG.c.fileloc)
        .where(_DAG.c.dag_id == _TI.c.dag_id)
        .scalar_subquery()
        .label("fileloc"),
    ),
    "What the claim's UPDATE returns: the run's and the DAG's columns by scalar "
    "subqueries on their keys, so the claim is one statement.",
    twin=True,
)
_RUN_CONF_ON_SQLITE = select(_RUN.c.conf, _RUN.c.triggering_events, _RUN.c.run_type).where(
    _RUN.c.id == bindparam("run_pk")
)
RUN_CONF = hot_statement("run_conf", same_values(_RUN_CONF_ON_SQLITE))
"""scheduler/core/sql/claim.sql; on SQLite its twin, built once (building a statement
costs as much as running it)."""


_AS_SENT = hot(
    "claimed TI is the message's",
    and_(
        unindexed(_TI.c.dag_id) == bindparam("m_dag"),
        unindexed(_TI.c.run_id) == bindparam("m_run"),
        unindexed(_TI.c.task_id) == bindparam("m_task"),
    ),
    "The code a try runs is the claimed row's: a message whose ids disagree with its "
    "TI's claims nothing (stale), whatever its ti_id and attempt_id. Each id is compared "
    "through `|| ''`: on `dag_id` itself a plan made while the table was small reads the "
    "DAG's every TI by ix_task_instance_dag_state to claim one.",
    twin=True,
)


def claim_statement(msg: RunMessage, hostname: str, pid: int, now: dt.datetime) -> Sent:
    """The claim of `msg` (`claim_try`): queued → running for its `attempt_id`, by
    `hostname`/`pid`, only if the TI is the one the message names (dag, run, task),
    returning the run's context; one statement."""
    values = {
        "ti_id": msg.ti_id,
        "attempt_id": msg.attempt_id,
        "dag_id": msg.dag_id,
        "run_id": msg.run_id,
        "task_id": msg.task_id,
        "hostname": hostname,
        "pid": pid,
        "now": now,
    }
    return CLAIM_TRY, values


def _claim_on_sqlite(values: Mapping[str, Any]) -> tuple[Update, dict[str, Any]]:
    """`claim_try`'s SQLite twin: the compare-and-set `ti_move_returning` builds."""
    move, params = ti_move_returning(
        values["ti_id"],
        TI.RUNNING,
        expect=[TI.QUEUED],
        attempt_id=values["attempt_id"],
        now=values["now"],
        values={"hostname": values["hostname"], "pid": values["pid"]},
        returning=_CLAIMED,
    )
    names = {"m_dag": values["dag_id"], "m_run": values["run_id"], "m_task": values["task_id"]}
    return _as_sent(move), {**params, **names}


CLAIM_TRY = hot_statement("claim_try", _claim_on_sqlite)
"""scheduler/core/sql/claim.sql."""


@functools.lru_cache(maxsize=4)
def _as_sent(move: Update) -> Update:
    check_registered(move, "the claim's statement cache")
    return built(f"{name_of(move)}, as sent", move.where(_AS_SENT), twin=True)


DagRows = Callable[[str, str, "str | None"], "Dag | None"]
"""The DAG row of (dag_id, version hash, its file's current path)."""


def _dag_reader(factory: sessionmaker[Session]) -> DagRows:
    """`_DAGS.get` that opens a session only when the cached copy is not that version
    (or of another file)."""

    def read(dag_id: str, version_hash: str, fileloc: str | None) -> Dag | None:
        cached = _DAGS.cached(dag_id, version_hash, fileloc)
        if cached is not None:
            return cached
        with transaction(single_statement_factory(factory)) as session:
            return _DAGS.get(session, dag_id, version_hash, fileloc)

    return read


def _read_context(
    dags: DagRows,
    msg: RunMessage,
    row: Any,
    spec_of: Callable[[str], dict[str, Any]] | None = None,
) -> Claimed:
    """The run's context from the claim's returned `row` (+ the upstream results);
    `dags` gives the DAG row."""
    dag = dags(row.dag_id, row.dag_hash, row.fileloc)
    serialized = dag.serialized if dag is not None and dag.serialized else {}
    stored = dag is not None and dag.serialized and spec_of is None
    if spec_of is not None:
        serialized = spec_of(row.dag_id)
    tasks = serialized.get("tasks", {})
    spec = tasks.get(row.task_id)
    upstream_ids = sorted(spec.get("upstream", [])) if spec else []
    upstream: dict[str, Any] = dict.fromkeys(upstream_ids)  # read by _read_for_context
    context = {
        "dag_id": row.dag_id,
        "run_id": row.run_id,
        "task_id": row.task_id,
        "map_index": row.map_index if row.map_index >= 0 else None,
        "logical_date": row.logical_date.isoformat(),
        "ds": row.logical_date.date().isoformat(),
        "data_interval_start": None,  # set by _read_for_context (by the run's type)
        "data_interval_end": None,
        "try_number": row.try_number,
        "conf": {},  # read by _read_for_context, for a task that takes the context
        "params": {},  # the DAG's defaults and the conf's params, with the conf
        "attempt_id": msg.attempt_id,
        "upstream": upstream,
        "trigger_event": trigger_event_of(row.waiting, row.try_number),
        "triggering_asset_events": [],  # read with the conf by _read_for_context
        "outlet_events": OutletEvents((spec or {}).get("outlets") or ()),
    }
    return Claimed(
        run_pk=row.run_pk,
        fileloc=dag.fileloc if dag is not None else None,
        spec=spec,
        dag=dag if stored else None,
        pool=row.pool,
        try_number=row.try_number,
        max_tries=row.max_tries,
        context=context,
        run_claimed=row.claimed_by_job_id is not None,
        map_index=row.map_index,
        mapped_upstream=frozenset(u for u in upstream_ids if tasks.get(u, {}).get("map")),
        per_index=per_index_of(spec) if spec else None,
        bundle_version=row.bundle_version,
        waiting=row.waiting,
        dag_spec=serialized,
    )


def _read_for_context(ctx: WorkerContext, claimed: Claimed, *, conf: bool) -> None:
    """Fill `context["upstream"]` with the upstream tasks' results and, with `conf`, the
    run's conf, its params (`tasks.params.param_values`: the DAG's defaults, overridden
    by the conf's keys that are params, which were checked when the run was made) and
    its data interval (`core.run_dates`, by the run's type): read only for a task that
    takes the context (a CeleryTask: the results, which its arguments may refer to).
    The claim returns none of them: a run's conf (up to SLUICE_MAX_CONF_BYTES) would
    travel with every claim of every task of the run."""
    upstream = claimed.context["upstream"]
    pre = claimed.pre_read
    if (
        upstream
        and pre is not None
        and set(pre.task_ids) == set(upstream)
        and pre.per_index == claimed.per_index
    ):
        _fill_upstream(claimed, upstream, pre.rows, pre.known)
        upstream = {}  # read already
    if not upstream and not conf:
        return
    with transaction(single_statement_factory(ctx.session_factory)) as session:
        if upstream:
            known = COPIES_OF_THIS_PROCESS.snapshot()
            params = read_params(
                known,
                upstream,
                claimed.per_index,
                run_pk=claimed.run_pk,
                map_index=claimed.map_index,
            )
            rows = executed(session, (UPSTREAM_RESULTS, params))
            _fill_upstream(claimed, upstream, rows, known)
        if conf:
            stored = executed(session, (RUN_CONF, {"run_pk": claimed.run_pk}))
            context = claimed.context
            context["conf"] = dict((stored[0].conf if stored else None) or {})
            mask_conf_secrets(context["conf"])  # before the task's code sees it
            events = stored[0].triggering_events if stored else None
            context["triggering_asset_events"] = list(events or ())
            context["params"] = param_values(claimed.dag_spec.get("params"), context["conf"])
            run_type = stored[0].run_type if stored else RunType.MANUAL
            logical = dt.datetime.fromisoformat(context["logical_date"])
            context.update(run_dates(claimed.dag_spec, run_type, logical))


def _fill_upstream(
    claimed: Claimed, upstream: dict[str, Any], rows: Any, known: dict[str, str]
) -> None:
    fill_upstream(
        upstream,
        rows,
        mapped=claimed.mapped_upstream,
        per_index=claimed.per_index,
        map_index=claimed.map_index,
        known=known,
    )


class FencedBody(dict[str, Any]):
    """`_execute`'s values for a body stopped by the fence (`heartbeat.FENCED`): nothing
    to record; the sweep takes the try over."""


def _execute(
    ctx: WorkerContext, msg: RunMessage, claimed: Claimed, stop: Stop, captured: TaskLogCapture
) -> tuple[TI, dict[str, Any]]:
    """Run the task's code; the state to write and its values. `Exception` and
    `TaskTimeout` are caught, and `TaskStopped` (the heartbeat found the try no longer
    running and used `stop`, or the try's hard limit recorded it: `Expired`): that
    try's state is already written by whoever took it, so its write will lose."""
    try:
        if claimed.fileloc is None:
            raise LookupError(f"DAG '{msg.dag_id}' is not in the database")
        local = local_file(ctx.settings, claimed.fileloc, claimed.bundle_version)
        dag = ctx.dags.get_dag(local, msg.dag_id)
        task = dag.tasks.get(msg.task_id)
        if task is None:
            stored = _stored_has(ctx, msg) if claimed.dag is not None else None
            if stored is False:
                log.info("%s is no longer in its DAG: removed, not run", _what(msg))
                return TI.REMOVED, {"next_retry_at": None}
            why = f"task '{msg.task_id}' is not in DAG '{msg.dag_id}' of {claimed.fileloc}"
            raise LookupError(f"{why}{_STORED_HAS_IT if stored else ''}")
        takes_context = wants_context(task)
        keyed = task.concurrency
        if isinstance(task, CeleryTask) or takes_context or task.reads_upstream or keyed:
            _read_for_context(ctx, claimed, conf=takes_context or keyed is not None)
        if isinstance(task, CeleryTask):
            if keyed is not None and (slot := _take_slot(ctx, msg, claimed, keyed)):
                return TI.SCHEDULED, {"slot": slot}
            external_id = _send_external(ctx, task, claimed.context["upstream"], msg)
            log.info("%s sent Celery task %s[%s]", _what(msg), task.name, external_id)
            return TI.RUNNING, {"external_id": external_id}
        with _hard_limit(ctx, msg, claimed, task, captured):
            if keyed is not None and (slot := _take_slot(ctx, msg, claimed, keyed)):
                return TI.SCHEDULED, {"slot": slot}  # the key: user code, under the limit
            if task.sensor is not None:
                value = _sense(ctx, msg, claimed, task, stop)
            else:
                value = run_task(task, claimed.context, stop)
        result = check_result(value, msg.task_id)
        output = claimed.spec.get("map_output") if claimed.spec else None
        if output is not None:
            check_map_output(value, output, ctx.settings.max_map_length, msg.task_id)
        if task.is_branch:
            branch_targets(task, value)  # a bad choice fails the task here, clearly
        check_extras(claimed.context["outlet_events"])  # a bad extra fails the task here
    except TaskStopped as exc:
        log.warning("%s, try %s, stopped: %s", _what(msg), claimed.try_number, exc)
        if stop.reason == FENCED:
            return TI.FAILED, FencedBody()
        return TI.FAILED, {"error": error_line(exc), "next_retry_at": None}
    except Skip as exc:
        log.info("%s skipped itself: %s", _what(msg), exc)
        return TI.SKIPPED, {"next_retry_at": None}
    except Reschedule as exc:
        log.info("%s found nothing yet: next poke at %s", _what(msg), exc.at.isoformat())
        return TI.UP_FOR_RESCHEDULE, {
            "next_retry_at": exc.at,
            "waiting": exc.waiting.stored(),
            "error": None,
        }
    except TaskDeferred as exc:
        log.info("%s deferred on %s", _what(msg), exc.classpath)
        due = utcnow() + dt.timedelta(seconds=exc.timeout) if exc.timeout else None
        trigger = {"classpath": exc.classpath, "kwargs": exc.kwargs, "timeout_at": due}
        return TI.DEFERRED, {"trigger": trigger}
    except SensorTimeout as exc:
        log.warning("%s, try %s: %s", _what(msg), claimed.try_number, exc)
        return TI.FAILED, {"error": error_line(exc), "next_retry_at": None}
    except (Exception, TaskTimeout) as exc:
        return _failure(msg, claimed, exc)
    return TI.SUCCESS, {"result": result, "error": None, "next_retry_at": None}


def _take_slot(
    ctx: WorkerContext, msg: RunMessage, claimed: Claimed, keyed: Concurrency
) -> Slot | None:
    """The try's key (user code; a bad one raises, which fails the try) and its slot:
    None when held, else what happened instead (`concurrency_slots.hold_slot`)."""
    key = concurrency_key(keyed, claimed.context)
    slot = hold_slot(ctx.session_factory, msg.ti_id, msg.attempt_id, key, utcnow())
    return None if slot is Slot.HELD else slot


def _sense(ctx: WorkerContext, msg: RunMessage, claimed: Claimed, task: Task, stop: Stop) -> Any:
    """Poke a sensor (`tasks.sensor.sense`): until done in poke mode; once in reschedule
    mode, whose state between pokes (its first poke, its pokes) came with the claim. An
    `ExternalTaskSensor`, and no other task, gets the read-only lookup of other runs'
    states in its context (`tasks.external_sensor`)."""
    options = task.sensor
    assert options is not None
    context = claimed.context
    if isinstance(task, ExternalTaskSensor):
        context = {**context, RUN_STATES: _run_states_reader(ctx.session_factory)}
    return sense(
        options,
        lambda: run_task(task, context, stop),
        Waiting.of(claimed.waiting, claimed.try_number, utcnow()),
        clock=utcnow,
        stopped=lambda: stop.error() if stop.reason is not None else None,
    )


def _run_states_reader(factory: sessionmaker[Session]) -> RunStates:
    """The lookup an ExternalTaskSensor pokes with: one read in a session of its own,
    closed before the poke goes on (`queries.run_states`)."""

    def read(dag_id: str, logical_date: dt.datetime, task_id: str | None) -> list[str] | None:
        with transaction(single_statement_factory(factory)) as session:
            return run_states(session, dag_id, logical_date, task_id)

    return read


def _hard_limit(
    ctx: WorkerContext, msg: RunMessage, claimed: Claimed, task: Task, captured: TaskLogCapture
) -> AbstractContextManager[object]:
    """The try's hard limit, around its task's code: a Python task with an
    `execution_timeout` still running `timeout_grace` seconds after it is recorded by
    `_expire` and ended (`time_limits.hard_limit`; its late end raises `Expired`). A
    shell task's command is killed at its timeout by `run_shell` itself."""
    if task.execution_timeout is None or isinstance(task, ShellTask):
        return contextlib.nullcontext()
    timeout = task.execution_timeout.total_seconds()
    expire = functools.partial(_expire, ctx, msg, claimed, captured, timeout)
    what = f"{_what(msg)}, try {claimed.try_number}"
    return hard_limit(timeout + ctx.settings.timeout_grace, expire, what)


def _expire(
    ctx: WorkerContext,
    msg: RunMessage,
    claimed: Claimed,
    captured: TaskLogCapture,
    timeout: float,
    how: Ending,
) -> None:
    """Record a try still running past its timeout and the grace (from the deadlines'
    thread, its code still running): `up_for_retry` or `failed` by its retries, with its
    log so far, as its own failure would be; then wake the schedulers."""
    error = TaskTimeout(f"task '{msg.task_id}' timed out after {timeout:g} s ({how.note})")
    new, values = _failure(msg, claimed, error)
    values = masked_error(ctx.settings, values, captured.mask)  # as every stored error
    outcome, follow = _record(ctx, msg, claimed, new, values, captured.final_snapshot())
    if outcome is not Outcome.STALE:
        _follow_up(ctx, claimed, follow)


_STORED_HAS_IT = (
    "; the DAG's stored version has it (the file changed after the last sync of the "
    "DAGs folder, or this worker reads another folder)"
)


def _stored_has(ctx: WorkerContext, msg: RunMessage) -> bool | None:
    """Whether the DAG's stored version (read now, not cached) has `msg.task_id`; None
    if no version is stored.

    A task dropped from its file can be queued from the run's rows after the folder's
    sync stored the new version and before a scheduler checks the run against it
    (`dagrun.verify_integrity`, which leaves `running` TIs alone): its try is then
    `removed`, as that check would have it. A file that lacks a task its stored version
    still has is a file changed since the last sync (a scheduler queued the task from the
    version before), or a worker reading another folder: the stored version is read
    again every `_SYNC_POLL` seconds until it changes, for at most one refresh interval
    and one parse (`SLUICE_DAG_REFRESH_INTERVAL` + `SLUICE_PARSE_TIMEOUT`). A version
    that still has the task then fails the try.
    """
    settings = ctx.settings
    deadline = time.monotonic() + settings.dag_refresh_interval + settings.parse_timeout
    waited_on: str | None = None
    while True:
        with transaction(single_statement_factory(ctx.session_factory)) as session:
            stored = _DAGS.get_many(session, [msg.dag_id]).get(msg.dag_id)
        if stored is None or not stored.serialized:
            return None
        has = msg.task_id in stored.serialized.get("tasks", {})
        if not has or time.monotonic() >= deadline:
            return has
        if waited_on is None:
            waited_on = stored.version_hash
            log.info("%s is not in its DAG file: waiting for the next sync", _what(msg))
        elif stored.version_hash != waited_on:
            return has  # a newer version has the task too
        time.sleep(_SYNC_POLL)


_SYNC_POLL = 0.2
"""Seconds between two reads of the stored version by `_stored_has`."""


def _send_external(
    ctx: WorkerContext, task: CeleryTask, upstream: dict[str, Any], msg: RunMessage
) -> str:
    """Send a CeleryTask's external task, its spans children of the TI's span (the
    message's `trace`, read from the request by the worker task)."""
    app = sending_app(ctx)
    with app.producer_or_acquire() as producer:
        sender = HeadersLast(producer)
        with carrying(sender, msg.trace) as headers:
            return task.send(app, upstream, msg.attempt_id, producer=sender, headers=headers)


_fallback_apps: dict[Settings, Any] = {}


def sending_app(ctx: WorkerContext) -> Any:
    """The Celery app that sends a CeleryTask's task: the app of the running Sluice task
    (the user's app under `sluice.attach`), else a Sluice app for `ctx.settings` (a local run).
    """
    running = current_task._get_current_object() if current_task else None
    if running is not None:
        return running.app
    if ctx.settings not in _fallback_apps:
        _fallback_apps[ctx.settings] = create_app(ctx.settings)
    return _fallback_apps[ctx.settings]


def _defer(
    ctx: WorkerContext, msg: RunMessage, external_id: str, task_log: LogSnapshot | None
) -> Outcome:
    """Record the external task's id on the running try (a guarded write; the state stays
    `running`). If the try moved meanwhile, revoke the external task: STALE."""

    def write() -> bool:
        with transaction(ctx.session_factory) as session:
            if task_log is not None:
                save_task_log(session, task_log, now=utcnow())
            done = session.execute(
                update(TaskInstance)
                .where(
                    TaskInstance.id == msg.ti_id,
                    TaskInstance.state == TI.RUNNING,
                    TaskInstance.attempt_id == msg.attempt_id,
                )
                .values(external_id=external_id, last_heartbeat_at=utcnow())
                .returning(TaskInstance.id)
                .execution_options(synchronize_session=False)
            )
            return done.first() is not None

    if not retrying(write):
        log.info("%s moved meanwhile: revoking Celery task %s", _what(msg), external_id)
        sending_app(ctx).control.revoke(external_id)
        return Outcome.STALE
    return Outcome.DEFERRED


def _wait_on_trigger(
    ctx: WorkerContext,
    msg: RunMessage,
    claimed: Claimed,
    trigger: dict[str, Any],
    task_log: LogSnapshot | None,
) -> Outcome:
    """running -> deferred for this attempt, and its `trigger` row, in one transaction
    (a triggerer takes it from there). Then wake the schedulers: its pool slot is free."""

    def write() -> bool:
        now = utcnow()
        with transaction(ctx.session_factory) as session:
            if task_log is not None:
                save_task_log(session, task_log, now=now)
            moved = move_ti(
                session,
                msg.ti_id,
                TI.DEFERRED,
                expect=[TI.RUNNING],
                attempt_id=msg.attempt_id,
                now=now,
                values={
                    "waiting": {"try": claimed.try_number, "trigger": trigger["classpath"]},
                    "next_retry_at": trigger["timeout_at"],
                    "error": None,
                },
            )
            if moved:
                add_trigger(session, msg.ti_id, msg.attempt_id, trigger, now)
            return moved

    if not retrying(write):
        log.info("%s moved meanwhile: its deferral is dropped", _what(msg))
        return Outcome.STALE
    ctx.waker.wake(claimed.run_pk, shared=not claimed.run_claimed)
    return Outcome.WAITING_ON_TRIGGER


def _failure(msg: RunMessage, claimed: Claimed, exc: BaseException) -> tuple[TI, dict[str, Any]]:
    error = error_line(exc)
    retry = claimed.try_number < claimed.max_tries
    capture = current_capture()  # the try's secrets are masked in the worker's log too
    mask = capture.mask if capture is not None and capture.mask is not None else str
    log.warning(
        "%s, try %s of %s, failed%s: %s\n%s",
        _what(msg),
        claimed.try_number,
        claimed.max_tries,
        ", will retry" if retry else "",
        mask(error),
        mask(cleaned_traceback(exc)),
    )
    if not retry:
        return TI.FAILED, {"error": error, "next_retry_at": None}
    delay = _retry_delay(claimed)
    return TI.UP_FOR_RETRY, {"error": error, "next_retry_at": utcnow() + delay}


def _retry_delay(claimed: Claimed) -> dt.timedelta:
    if claimed.spec is None:
        return dt.timedelta(0)
    return retry_delay_for(claimed.spec, claimed.try_number)


def cleaned_traceback(exc: BaseException) -> str:
    """The traceback of `exc` as text safe to log (a task's message may hold a NUL or a lone
    surrogate, which a UTF-8 log stream cannot write)."""
    return storable("".join(traceback.format_exception(exc)).rstrip())


def error_line(exc: BaseException) -> str:
    """`Type: message` on one line, truncated to ERROR_MAX_CHARS."""
    text = " ".join(str(exc).split())
    line = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return short_error(line)


def outlet_events_of(msg: RunMessage, claimed: Claimed) -> tuple[NewEvent, ...]:
    """The asset events of a success: one per outlet of its task, with the `extra` the
    task set (`context["outlet_events"]`, checked by `check_extras`)."""
    outlets: OutletEvents = claimed.context["outlet_events"]
    source = (msg.dag_id, msg.run_id, msg.task_id, claimed.map_index)
    return tuple(
        NewEvent(uri, dict(event.get("extra") or {}), source) for uri, event in outlets.items()
    )


_SCHEDULES_DOWNSTREAM = frozenset({TI.SUCCESS, TI.SKIPPED})
"""Results after which the worker decides the downstream itself; a failure's
upstream_failed cascade is left to the scheduler."""


def _record(
    ctx: WorkerContext,
    msg: RunMessage,
    claimed: Claimed,
    new: TI,
    values: dict[str, Any],
    task_log: LogSnapshot | None = None,
) -> tuple[Outcome, FollowUp | None]:
    """running -> `new` for this attempt, with the try's log, by the one result path
    that applies (`sluice.broker.worker.result`): the direct downstream decided and
    queued with it when the worker decides it.

    STALE if the CAS lost (the log of the try is stored all the same by the paths that
    store it). The follow-up is None when the downstream was not looked at (the
    schedulers must be woken).
    """
    decides = ctx.publish is not None and ctx.settings.schedule_after_task
    decides = decides and new in _SCHEDULES_DOWNSTREAM
    shape, plan = decision(
        claimed.dag,
        msg.task_id,
        claimed.pool,
        new,
        decides=decides,
        map_index=claimed.map_index,
    )
    events = outlet_events_of(msg, claimed) if new is TI.SUCCESS else ()
    recorded = record_result(
        Case(
            factory=ctx.session_factory,
            ti_id=msg.ti_id,
            attempt_id=msg.attempt_id,
            task_id=msg.task_id,
            run_pk=claimed.run_pk,
            pool=claimed.pool,
            dag=claimed.dag,
            new=new,
            values=values,
            task_log=task_log,
            tracing=ctx.trace_tis,
            shape=shape,
            plan=plan,
            asset_events=events,
        )
    )
    if ctx.observe is not None:
        ctx.observe(recorded)
    if not recorded.won:
        log.info(
            "result %s of %s dropped (%s): the TI moved meanwhile", new, _what(msg), recorded.via
        )
        return Outcome.STALE, None
    log.info("%s -> %s (%s)", _what(msg), new, recorded.via)
    return Outcome(new.value), recorded.follow
