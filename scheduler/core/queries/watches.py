"""Watched DAGs in the database (`dag_watch`, `watch_key`): which are due, who evaluates
each (a lease), and what each evaluation left (cursor, error, keys seen).

Invariants: a triggerer evaluates a watch only while it holds its lease (taken `FOR
UPDATE SKIP LOCKED` when due and not leased, or leased past `lease_until`); what an
evaluation made is recorded under the row's lock and only if the lease is still the
recorder's (`locked_if_mine`), in the transaction that makes its runs.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy import delete, or_, select, update
from sqlalchemy.orm import Session

from sluice.scheduler.core.models import Dag, DagWatch, WatchKey
from sluice.scheduler.core.upsert import upsert


def record_watch(session: Session, dag_id: str, spec: Mapping[str, Any], now: dt.datetime) -> None:
    """Keep `dag_watch` in step with `spec` (a DAG's latest version): a watched DAG has a
    row (a new one is due now); another has none (its keys seen are kept)."""
    schedule = spec.get("schedule")
    if isinstance(schedule, dict) and "watch" in schedule:
        values = {"dag_id": dag_id, "next_eval_at": now, "evaluations": 0}
        upsert(session, DagWatch, values, keys=["dag_id"], update=[])
    else:
        session.execute(delete(DagWatch).where(DagWatch.dag_id == dag_id))


def lease_due(
    session: Session, owner: int, now: dt.datetime, lease_of: Callable[[Dag], float]
) -> Dag | None:
    """Lease the most overdue watch of an active, unpaused DAG to `owner` for
    `lease_of(dag)` seconds; its DAG row, None if none is due (`SKIP LOCKED`:
    triggerers share them)."""
    found = session.execute(
        select(DagWatch, Dag)
        .join(Dag, Dag.dag_id == DagWatch.dag_id)
        .where(
            DagWatch.next_eval_at <= now,
            or_(DagWatch.lease_until.is_(None), DagWatch.lease_until < now),
            Dag.is_active.is_(True),
            Dag.is_paused.is_(False),
        )
        .order_by(DagWatch.next_eval_at)
        .limit(1)
        .with_for_update(of=DagWatch, skip_locked=True)
    ).first()
    if found is None:
        return None
    watch, dag = found
    watch.lease_owner = owner
    watch.lease_until = now + dt.timedelta(seconds=lease_of(dag))
    session.flush()
    return dag


def locked_if_mine(session: Session, dag_id: str, owner: int) -> DagWatch | None:
    """The watch's row, locked, if `owner` still holds its lease; else None."""
    return session.scalars(
        select(DagWatch)
        .where(DagWatch.dag_id == dag_id, DagWatch.lease_owner == owner)
        .with_for_update()
    ).first()


def release_leases(session: Session, owner: int) -> None:
    """What `owner` held goes back at once (a triggerer that stops)."""
    session.execute(
        update(DagWatch)
        .where(DagWatch.lease_owner == owner)
        .values(lease_owner=None, lease_until=None)
    )


def watch_of(session: Session, dag_id: str) -> DagWatch | None:
    return session.get(DagWatch, dag_id)


def keys_seen(session: Session, dag_id: str, limit: int = 100) -> list[WatchKey]:
    """The newest `limit` run keys the watch made runs for."""
    return list(
        session.scalars(
            select(WatchKey)
            .where(WatchKey.dag_id == dag_id)
            .order_by(WatchKey.created_at.desc(), WatchKey.run_key)
            .limit(limit)
        )
    )


def watch_errors(session: Session, dag_ids: Sequence[str] | None = None) -> dict[str, str]:
    """The DAGs (of `dag_ids`, or all) whose last watch evaluation failed, with its error."""
    query = select(DagWatch.dag_id, DagWatch.last_error).where(DagWatch.last_error.is_not(None))
    if dag_ids is not None:
        query = query.where(DagWatch.dag_id.in_(list(dag_ids)))
    return {dag_id: str(error) for dag_id, error in session.execute(query).all()}
