"""`GET /api/v1/assets` and `POST /api/v1/assets/events`, as `sluice assets list` and
`sluice assets event` do.

An event sent here is checked (`control.asset_events`) before anything is written, then
written with its queue rows in the request's transaction; the schedulers are woken after
the answer (the commit) and make the runs of the DAGs scheduled on the asset.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, BackgroundTasks

from sluice.scheduler.api.deps import CanRead, CanWrite, DbSession, State
from sluice.scheduler.api.errors import unprocessable
from sluice.scheduler.api.responses import errors
from sluice.scheduler.api.schemas import AssetEventIn, AssetEventOut, AssetList, AssetOut
from sluice.scheduler.control.asset_events import checked_event, send_asset_event
from sluice.scheduler.control.inputs import InputError
from sluice.scheduler.control.operations import wake_schedulers
from sluice.scheduler.core.db import utcnow
from sluice.scheduler.core.queries.assets import summaries

router = APIRouter(prefix="/api/v1/assets", tags=["assets"])


@router.get("", response_model=AssetList, dependencies=[CanRead], responses=errors())
def list_assets(session: DbSession) -> AssetList:
    """Each known asset (by URI, at most 1000): the tasks that produce it, the DAGs
    scheduled on it, how many events it has and its last one."""
    return AssetList(
        assets=[
            AssetOut(
                uri=a.uri,
                name=a.name,
                producers=a.producers,
                consumers=a.consumers,
                events=a.events,
                last_event=a.last_event,
            )
            for a in summaries(session)
        ]
    )


@router.post("/events", response_model=AssetEventOut, dependencies=[CanWrite], responses=errors())
def send_event(
    body: AssetEventIn, session: DbSession, state: State, after: BackgroundTasks
) -> AssetEventOut:
    """Record an event on the asset `uri`, with `extra` (a JSON object, null: `{}`):
    each DAG scheduled on it gets it among its next run's triggering events."""
    extra: Any = body.extra
    try:
        event = checked_event(state.settings, body.uri, extra)
    except InputError as exc:
        raise unprocessable(str(exc)) from None
    event_id = send_asset_event(session, event, utcnow())
    after.add_task(wake_schedulers, state.settings)
    return AssetEventOut(id=event_id, uri=event.uri)
