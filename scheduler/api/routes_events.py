"""`POST /api/v1/events`: send an event, as `sluice events send` does.

The event resumes every task instance deferred on `sluice.triggers.Event(key)` in the
request's transaction (`core.queries.events.resume_on_event`), and is stored: one that
defers on the key later, in a run queued before the event, still finds it. The key and
the payload are checked as the CLI checks them (`control.inputs`) before anything is
written; the schedulers are woken after the answer (the commit).
"""

from __future__ import annotations

from fastapi import APIRouter, BackgroundTasks

from sluice.scheduler.api.deps import CanWrite, DbSession, State
from sluice.scheduler.api.errors import unprocessable
from sluice.scheduler.api.responses import errors
from sluice.scheduler.api.schemas import EventIn, EventOut
from sluice.scheduler.control.inputs import InputError, check_conf
from sluice.scheduler.control.operations import wake_schedulers
from sluice.scheduler.core.db import utcnow
from sluice.scheduler.core.queries.events import resume_on_event

router = APIRouter(prefix="/api/v1/events", tags=["events"])


@router.post("", response_model=EventOut, dependencies=[CanWrite], responses=errors())
def send_event(body: EventIn, session: DbSession, state: State, after: BackgroundTasks) -> EventOut:
    """Send an event on `key`: every task instance deferred on `Event(key)` resumes, its
    `context["trigger_event"]` the payload (`{}` when none); the answer says how many."""
    try:
        payload = check_conf(
            body.payload or {},
            max_bytes=state.settings.max_conf_bytes,
            max_depth=state.settings.max_conf_depth,
            what="payload",
        )
    except InputError as exc:
        raise unprocessable(str(exc)) from None
    resumed = resume_on_event(session, body.key, payload, utcnow())
    if resumed:
        after.add_task(wake_schedulers, state.settings)
    return EventOut(resumed=resumed)
