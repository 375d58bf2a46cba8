"""A claimed try's concurrency slot: the key its task's `Concurrency` computes (user
code, on the worker, before the task's code), then the slot taken or the try given back.

Invariants (`hold_slot`, one transaction):
- The TI's row is locked first (`FOR UPDATE`, still `running` for this attempt), then
  the key's lock (`core.queries.limits.lock_keys`), then its holders are counted: the
  order every giver of a slot follows, so two workers with one key never over-fill it.
- A TI whose key is set already holds its slot (a scheduler queued it within the
  limit): nothing more is taken.
- Under the limit, the key is written on the TI: it holds a slot until it leaves
  `running` (its result, a cancel, a mark, a timeout, a sweep), in that move's own
  transaction. At the limit, the try is given back: `running` -> `scheduled` with its
  key, its try number as before the queueing (the try did not happen), for a
  scheduler to queue when a slot frees (`decide.limited`).
"""

from __future__ import annotations

import datetime as dt
import logging
from enum import StrEnum

from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from sluice.scheduler.core.db import transaction
from sluice.scheduler.core.models import TaskInstance
from sluice.scheduler.core.queries.limits import lock_keys, slots_in_use
from sluice.scheduler.core.states import TI
from sluice.scheduler.core.transitions import move_ti

log = logging.getLogger(__name__)


class Slot(StrEnum):
    HELD = "held"
    """The try holds a slot of its key: its code runs."""
    GIVEN_BACK = "given_back"
    """Every slot of its key is held by others: the TI waits in `scheduled`."""
    LOST = "lost"
    """The TI is no longer this try's (cleared, swept, marked): nothing was written."""


def hold_slot(
    factory: sessionmaker[Session], ti_id: int, attempt_id: str, key: str, now: dt.datetime
) -> Slot:
    """Take a slot of (the TI's concurrency, `key`) for the running try `attempt_id` of
    TI `ti_id`, or give the try back (see the module's invariants)."""
    with transaction(factory) as session:
        row = session.execute(
            select(
                TaskInstance.concurrency,
                TaskInstance.concurrency_limit,
                TaskInstance.concurrency_key,
            )
            .where(
                TaskInstance.id == ti_id,
                TaskInstance.state == TI.RUNNING,
                TaskInstance.attempt_id == attempt_id,
            )
            .with_for_update()
        ).first()
        if row is None:
            return Slot.LOST
        name, limit, known = row
        if name is None or known is not None:
            return Slot.HELD  # no limit in the run's version, or queued within it
        lock_keys(session, [(name, key)])
        used = slots_in_use(session, [(name, key)])[(name, key)]
        ti = TaskInstance.__table__.c
        if used < int(limit or 1):
            session.execute(
                update(TaskInstance)
                .where(TaskInstance.id == ti_id)
                .values(concurrency_key=key)
                .execution_options(synchronize_session=False)
            )
            return Slot.HELD
        given_back = {
            "concurrency_key": key,
            "try_number": ti.try_number - 1,
            "attempt_id": None,
            "hostname": None,
            "pid": None,
            "start_date": None,
            "end_date": None,
        }
        moved = move_ti(
            session,
            ti_id,
            TI.SCHEDULED,
            expect=[TI.RUNNING],
            attempt_id=attempt_id,
            now=now,
            values=given_back,
        )
        log.info("TI %s: every slot of %s[%s] is held (%d): it waits", ti_id, name, key, used)
        return Slot.GIVEN_BACK if moved else Slot.LOST
