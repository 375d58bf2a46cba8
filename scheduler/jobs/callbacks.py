"""The scheduler's part in callbacks: publish the due ones, fire missed deadlines.

A scheduler never runs a callback. Each loop (at most every `PUBLISH_EVERY` seconds) it
takes the due callbacks in one short transaction of its own (SKIP LOCKED: with several
schedulers each is taken once), commits them `queued` with a fresh token, then publishes
one message per callback on the callback queue; a worker runs it
(`sluice.broker.worker.callbacks`). A message lost before a worker claimed it (a broker
restarted or flushed, a scheduler killed between its commit and its publish) is published
again after `queued_timeout` with a new token, which makes the lost one stale if it ever
arrives; a running callback, only once its worker has stopped beating for it for
`heartbeat_timeout` (the worker lost), however long it runs. Missed deadlines are looked
for once a second.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Sequence

from sqlalchemy.orm import Session, sessionmaker

from sluice.scheduler.core.db import transaction
from sluice.scheduler.core.messages import CallbackMessage
from sluice.scheduler.core.queries import callbacks as due
from sluice.scheduler.core.settings import Settings
from sluice.scheduler.jobs.periodic import Every

log = logging.getLogger(__name__)

PUBLISH_EVERY = 0.2
"""Seconds between two looks for due callbacks (a task's failure waits this at most)."""
DEADLINES_EVERY = 1.0

PublishCallbacks = Callable[[Sequence[CallbackMessage]], None]


class CallbackDelivery:
    """One scheduler's callback step (`step`, called from its loop)."""

    def __init__(
        self, settings: Settings, factory: sessionmaker[Session], publish: PublishCallbacks
    ) -> None:
        self.settings = settings
        self.factory = factory
        self.publish = publish
        self._publishes = Every(PUBLISH_EVERY)
        self._deadlines = Every(DEADLINES_EVERY)

    def step(self, now: dt.datetime) -> int:
        """Fire missed deadlines (when due), then publish what is due; how many published."""
        if self._deadlines.take(now):
            with transaction(self.factory) as session:
                fired = due.fire_deadlines(session, now)
            if fired:
                log.warning("%d runs missed their deadline: on_deadline_missed is due", fired)
        if not self._publishes.take(now):
            return 0
        with transaction(self.factory) as session:
            messages = due.publish_due(
                session,
                now,
                republish_after=self.settings.queued_timeout,
                heartbeat_timeout=self.settings.heartbeat_timeout,
                max_attempts=self.settings.callback_max_attempts,
            )
        if messages:
            try:
                self.publish(messages)
            except Exception as exc:  # the broker is down: published again when lost
                log.warning(
                    "publishing %d callbacks failed (%s); will re-publish", len(messages), exc
                )
        return len(messages)
