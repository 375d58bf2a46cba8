"""An asset event sent from outside (`sluice assets event`, `POST /api/v1/assets/events`):
checked, then written with its queue rows in the caller's transaction.

The URI and the extra are checked as every input is (`inputs`), before anything is
written; the caller wakes the schedulers after its commit (they make the runs).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy.orm import Session

from sluice.scheduler.control.inputs import check_asset_uri, check_conf
from sluice.scheduler.core.queries.assets import NewEvent, record_events
from sluice.scheduler.core.settings import Settings
from sluice.tasks.assets import EXTRA_MAX_BYTES


def checked_event(settings: Settings, uri: str, extra: Any) -> NewEvent:
    """The event to send on `uri` with `extra` (a JSON object, None: `{}`); InputError
    (one line) for a bad URI or extra."""
    checked = check_conf(
        extra if extra is not None else {},
        max_bytes=min(settings.max_conf_bytes, EXTRA_MAX_BYTES),
        max_depth=settings.max_conf_depth,
        what="extra",
    )
    return NewEvent(check_asset_uri(uri), checked)


def send_asset_event(session: Session, event: NewEvent, now: dt.datetime) -> int:
    """Write `event` (queued for the DAGs that consume its asset); its id."""
    return record_events(session, [event], now)[0]
