"""The room statements of scheduler/core/sql/ run as a worker runs them, then undone: for
the tests that compare them with their Python twin (`queueing.Capacity`)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy.orm import Session

from sluice.scheduler.core.db import executed
from sluice.scheduler.decide.downstream_sql import QUEUE_TI_IF_ROOM, fill_statement

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def queued_if_room(
    session: Session, ti_id: int, *, pool: str, slots: int, total: int, dag_id: str, max_active: int
) -> bool:
    """Whether `queue_ti_if_room` queues the `none` TI `ti_id` (its write undone)."""
    values: dict[str, Any] = {
        "ti_id": ti_id,
        "attempt_id": "room-check",
        "now": NOW,
        "pool": pool,
        "slots": slots,
        "pool_total": total,
        "dag_id": dag_id,
        "max_active": max_active,
    }
    with session.begin_nested() as undone:
        queued = executed(session, (QUEUE_TI_IF_ROOM, values))
        undone.rollback()
    return bool(queued)


def filled(session: Session, pool: str) -> int | None:
    """The TI `queue_next_waiting` queues into a slot freed in `pool` (its write undone)."""
    with session.begin_nested() as undone:
        rows = executed(session, fill_statement(pool, "fill-check", NOW))
        undone.rollback()
    return rows[0].id if rows else None
