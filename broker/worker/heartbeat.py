"""Heartbeats of running tries: one daemon thread per worker process beats them all.

A liveness write, not a state move: `UPDATE task_instance SET last_heartbeat_at
WHERE (id, attempt_id) IN (…) AND state = 'running'`, one short transaction per
beat for every try this process runs. A try that is no longer running (cleared,
swept) simply stops matching. Errors are logged and the next beat tries again.
Registering a try costs a dict insert, not a thread start.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from sqlalchemy import tuple_, update
from sqlalchemy.orm import Session, sessionmaker

from sluice.scheduler.core.db import transaction, utcnow
from sluice.scheduler.core.models import TaskInstance
from sluice.scheduler.core.states import TI

log = logging.getLogger("sluice.worker")


class Beater:
    """Beats every registered (ti_id, attempt_id) each `interval` seconds."""

    def __init__(self, factory: sessionmaker[Session], interval: float) -> None:
        self._factory = factory
        self._interval = interval
        self._tries: dict[int, str] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def add(self, ti_id: int, attempt_id: str) -> None:
        with self._lock:
            self._tries[ti_id] = attempt_id
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="sluice-heartbeat", daemon=True
                )
                self._thread.start()

    def remove(self, ti_id: int) -> None:
        with self._lock:
            self._tries.pop(ti_id, None)

    def _run(self) -> None:
        stop = threading.Event()
        while not stop.wait(self._interval):
            with self._lock:
                tries = list(self._tries.items())
            if not tries:
                continue
            try:
                self.beat(tries)
            except Exception as exc:
                log.warning("heartbeat of %d running tries failed: %s", len(tries), exc)

    def beat(self, tries: list[tuple[int, str]]) -> int:
        """One beat for `tries`; returns how many are still running."""
        with transaction(self._factory) as session:
            result = session.execute(
                update(TaskInstance)
                .where(
                    tuple_(TaskInstance.id, TaskInstance.attempt_id).in_(tries),
                    TaskInstance.state == TI.RUNNING,
                )
                .values(last_heartbeat_at=utcnow())
                .execution_options(synchronize_session=False)
            )
            return int(getattr(result, "rowcount", 0) or 0)


_beaters: dict[tuple[int, int], Beater] = {}
_beaters_lock = threading.Lock()


def beater_for(factory: sessionmaker[Session], interval: float) -> Beater:
    """This process's beater for `factory` (a forked child gets its own)."""
    key = (os.getpid(), id(factory))
    with _beaters_lock:
        beater = _beaters.get(key)
        if beater is None:
            beater = _beaters[key] = Beater(factory, interval)
        return beater


class Heartbeat:
    """Context manager: the try beats while the block runs."""

    def __init__(
        self, factory: sessionmaker[Session], interval: float, ti_id: int, attempt_id: str
    ) -> None:
        self._beater = beater_for(factory, interval)
        self._ti_id, self._attempt_id = ti_id, attempt_id

    def __enter__(self) -> Heartbeat:
        self._beater.add(self._ti_id, self._attempt_id)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._beater.remove(self._ti_id)
