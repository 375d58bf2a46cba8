"""Assets in the database: their events, who produces and consumes them, and the events
each consuming DAG has not consumed yet (`asset_queue`).

Invariants: an event and its queue rows are written in one transaction (the caller's: a
producing task's result, or an event sent from outside), one queue row per DAG whose
latest version's schedule names the asset; a queue row is deleted only by the run that
consumes it, under its DAG's row lock (`scheduling.asset_runs`), so each event triggers
each consuming DAG at most once.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, func, insert, literal, select
from sqlalchemy.orm import Session

from sluice.scheduler.core.models import Asset, AssetEvent, AssetQueue, Dag, DagAsset
from sluice.scheduler.core.upsert import upsert
from sluice.tasks.assets import condition_uris

CONSUMES = "consumes"
PRODUCES = "produces"
CONSUMED_AT_ONCE = 1000
"""Most events one asset-triggered run consumes (the rest wait for the next run)."""


@dataclass(frozen=True)
class NewEvent:
    """An asset event to record: its asset, `extra`, and the TI that made it (None:
    sent from outside)."""

    uri: str
    extra: Mapping[str, Any]
    source: tuple[str, str, str, int] | None = None
    """(dag_id, run_id, task_id, map_index) of the producing TI."""


def ensure_assets(session: Session, uris: Iterable[str], now: dt.datetime) -> None:
    """Record the assets `uris` (a known one is left as it is)."""
    for uri in sorted(set(uris)):
        upsert(session, Asset, {"uri": uri, "created_at": now}, keys=["uri"], update=[])


def record_events(session: Session, events: Sequence[NewEvent], now: dt.datetime) -> list[int]:
    """Write `events` and queue each for the active DAGs that consume its asset; their ids."""
    ensure_assets(session, (e.uri for e in events), now)
    ids: list[int] = []
    for event in events:
        source = event.source or (None, None, None, None)
        event_id = session.scalar(
            insert(AssetEvent)
            .values(
                uri=event.uri,
                extra=dict(event.extra),
                source_dag_id=source[0],
                source_run_id=source[1],
                source_task_id=source[2],
                source_map_index=source[3],
                created_at=now,
            )
            .returning(AssetEvent.id)
        )
        assert event_id is not None
        consumers = (
            select(DagAsset.dag_id, literal(event_id))
            .join(Dag, Dag.dag_id == DagAsset.dag_id)
            .where(
                DagAsset.uri == event.uri,
                DagAsset.role == CONSUMES,
                Dag.is_active.is_(True),
            )
        )
        session.execute(insert(AssetQueue).from_select(["dag_id", "event_id"], consumers))
        ids.append(event_id)
    return ids


def record_references(
    session: Session, dag_id: str, spec: Mapping[str, Any], now: dt.datetime
) -> None:
    """Make `dag_asset` say what `spec` (a DAG's latest version) consumes and produces;
    its queued events of assets it no longer consumes are dropped."""
    consumed = _consumed(spec)
    rows = [{"dag_id": dag_id, "role": CONSUMES, "task_id": "", "uri": u} for u in consumed]
    for task_id, task in (spec.get("tasks") or {}).items():
        rows += [
            {"dag_id": dag_id, "role": PRODUCES, "task_id": task_id, "uri": uri}
            for uri in sorted(set(task.get("outlets") or ()))
        ]
    had = session.execute(
        select(DagAsset.role, DagAsset.task_id, DagAsset.uri).where(DagAsset.dag_id == dag_id)
    ).all()
    if {tuple(r) for r in had} == {(r["role"], r["task_id"], r["uri"]) for r in rows}:
        return
    ensure_assets(session, (r["uri"] for r in rows), now)
    session.execute(delete(DagAsset).where(DagAsset.dag_id == dag_id))
    if rows:
        session.execute(insert(DagAsset), rows)
    stale = select(AssetEvent.id).where(
        AssetEvent.id == AssetQueue.event_id, AssetEvent.uri.not_in(consumed or [""])
    )
    session.execute(delete(AssetQueue).where(AssetQueue.dag_id == dag_id, stale.exists()))


def _consumed(spec: Mapping[str, Any]) -> list[str]:
    schedule = spec.get("schedule")
    if isinstance(schedule, dict) and "assets" in schedule:
        return sorted(condition_uris(schedule["assets"]))
    return []


def dags_with_queued_events(session: Session) -> list[str]:
    """The active, unpaused DAGs with an event queued for them."""
    return list(
        session.scalars(
            select(AssetQueue.dag_id)
            .join(Dag, Dag.dag_id == AssetQueue.dag_id)
            .where(Dag.is_active.is_(True), Dag.is_paused.is_(False))
            .distinct()
            .order_by(AssetQueue.dag_id)
        )
    )


def queued_events(session: Session, dag_id: str) -> list[AssetEvent]:
    """The oldest CONSUMED_AT_ONCE events queued for `dag_id`, in event order."""
    return list(
        session.scalars(
            select(AssetEvent)
            .join(AssetQueue, AssetQueue.event_id == AssetEvent.id)
            .where(AssetQueue.dag_id == dag_id)
            .order_by(AssetEvent.id)
            .limit(CONSUMED_AT_ONCE)
        )
    )


def consume(session: Session, dag_id: str, event_ids: Sequence[int]) -> None:
    """Delete the queue rows of `event_ids` for `dag_id` (their run is made)."""
    session.execute(
        delete(AssetQueue).where(
            AssetQueue.dag_id == dag_id, AssetQueue.event_id.in_(list(event_ids))
        )
    )


def as_context(event: AssetEvent) -> dict[str, Any]:
    """An event as `context["triggering_asset_events"]` lists it."""
    return {
        "uri": event.uri,
        "extra": dict(event.extra or {}),
        "source_dag_id": event.source_dag_id,
        "source_run_id": event.source_run_id,
        "source_task_id": event.source_task_id,
        "timestamp": event.created_at.isoformat(),
    }


@dataclass(frozen=True)
class AssetSummary:
    """One asset as `sluice assets list` and `GET /api/v1/assets` show it."""

    uri: str
    name: str | None
    producers: list[str]
    """`dag_id.task_id` of each task that lists it in its outlets."""
    consumers: list[str]
    """The DAGs whose schedule names it."""
    last_event: dict[str, Any] | None
    events: int


def summaries(session: Session, limit: int = 1000, uri: str | None = None) -> list[AssetSummary]:
    """The known assets (at most `limit`, by URI), each with who uses it and its last event."""
    query = select(Asset).order_by(Asset.uri).limit(limit)
    if uri is not None:
        query = query.where(Asset.uri == uri)
    assets = list(session.scalars(query))
    uris = [a.uri for a in assets]
    if not uris:
        return []
    refs = session.execute(
        select(DagAsset.uri, DagAsset.role, DagAsset.dag_id, DagAsset.task_id)
        .join(Dag, Dag.dag_id == DagAsset.dag_id)
        .where(DagAsset.uri.in_(uris), Dag.is_active.is_(True))
        .order_by(DagAsset.dag_id, DagAsset.task_id)
    ).all()
    last_ids = dict(
        session.execute(
            select(AssetEvent.uri, func.max(AssetEvent.id))
            .where(AssetEvent.uri.in_(uris))
            .group_by(AssetEvent.uri)
        ).all()
    )
    counts = dict(
        session.execute(
            select(AssetEvent.uri, func.count())
            .where(AssetEvent.uri.in_(uris))
            .group_by(AssetEvent.uri)
        ).all()
    )
    lasts = {
        e.uri: e
        for e in session.scalars(select(AssetEvent).where(AssetEvent.id.in_(last_ids.values())))
    }
    found = []
    for asset in assets:
        mine = [r for r in refs if r.uri == asset.uri]
        last = lasts.get(asset.uri)
        found.append(
            AssetSummary(
                uri=asset.uri,
                name=asset.name,
                producers=[f"{r.dag_id}.{r.task_id}" for r in mine if r.role == PRODUCES],
                consumers=[r.dag_id for r in mine if r.role == CONSUMES],
                last_event=as_context(last) if last is not None else None,
                events=int(counts.get(asset.uri, 0)),
            )
        )
    return found


def assets_of_dag(session: Session, dag_id: str) -> dict[str, list[str]]:
    """What `dag_id` consumes and produces: {"consumes": [uri], "produces": [uri]}."""
    rows = session.execute(
        select(DagAsset.role, DagAsset.uri).where(DagAsset.dag_id == dag_id).distinct()
    ).all()
    return {
        CONSUMES: sorted(u for r, u in rows if r == CONSUMES),
        PRODUCES: sorted({u for r, u in rows if r == PRODUCES}),
    }
