"""Heartbeats of running tries: one daemon thread per worker process beats them all.

A liveness write, not a state move: `UPDATE task_instance SET last_heartbeat_at
WHERE (id, attempt_id) IN (…) AND state = 'running' RETURNING id`, one short transaction
per beat for every try this process runs. A try that no longer matches has lost its
running state to someone else (its run cancelled, the TI marked, cleared, timed out or
swept): the beat stops it (its `on_lost`, `runtime.Stop.stop`), whatever the pool, so
it ends within one heartbeat interval even if the revoke broadcast never reached this
worker. A beat that fails (the database unreachable) stops nothing: errors are logged
and the next beat tries again. Registering a try costs a dict insert, not a thread start.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Any

from sqlalchemy import tuple_, update
from sqlalchemy.orm import Session, sessionmaker

from sluice.scheduler.core.db import transaction, utcnow
from sluice.scheduler.core.models import TaskInstance
from sluice.scheduler.core.states import TI

log = logging.getLogger("sluice.worker")


OnLost = Callable[[str], None]
"""Called once, from the heartbeat thread, with why a try is to stop."""

LOST = "the try is no longer running (its run cancelled, or the TI marked, cleared or timed out)"


class Beater:
    """Beats every registered (ti_id, attempt_id) each `interval` seconds."""

    def __init__(self, factory: sessionmaker[Session], interval: float) -> None:
        self._factory = factory
        self._interval = interval
        self._tries: dict[int, str] = {}
        self._on_lost: dict[int, OnLost] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def add(self, ti_id: int, attempt_id: str, on_lost: OnLost | None = None) -> None:
        with self._lock:
            self._tries[ti_id] = attempt_id
            if on_lost is not None:
                self._on_lost[ti_id] = on_lost
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="sluice-heartbeat", daemon=True
                )
                self._thread.start()

    def remove(self, ti_id: int) -> None:
        with self._lock:
            self._tries.pop(ti_id, None)
            self._on_lost.pop(ti_id, None)

    def _run(self) -> None:
        stop = threading.Event()
        while not stop.wait(self._interval):
            with self._lock:
                tries = list(self._tries.items())
            if not tries:
                continue
            try:
                running = self.beat(tries)
            except Exception as exc:
                log.warning("heartbeat of %d running tries failed: %s", len(tries), exc)
                continue
            self._stop_lost(tries, running)

    def beat(self, tries: list[tuple[int, str]]) -> set[int]:
        """One beat for `tries`; returns the ids of the TIs still running them."""
        with transaction(self._factory) as session:
            result = session.execute(
                update(TaskInstance)
                .where(
                    tuple_(TaskInstance.id, TaskInstance.attempt_id).in_(tries),
                    TaskInstance.state == TI.RUNNING,
                )
                .values(last_heartbeat_at=utcnow())
                .returning(TaskInstance.id)
                .execution_options(synchronize_session=False)
            )
            return set(result.scalars())

    def _stop_lost(self, tries: list[tuple[int, str]], running: set[int]) -> None:
        """Stop the tries of `tries` not in `running` that are still registered with the
        same attempt (one that ended during the beat is not stopped)."""
        for ti_id, attempt_id in tries:
            if ti_id in running:
                continue
            with self._lock:
                if self._tries.get(ti_id) != attempt_id:
                    continue
                on_lost = self._on_lost.pop(ti_id, None)
            if on_lost is not None:
                log.warning("try %s of TI %s is no longer running: stopping it", attempt_id, ti_id)
                on_lost(LOST)


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
        self,
        factory: sessionmaker[Session],
        interval: float,
        ti_id: int,
        attempt_id: str,
        on_lost: OnLost | None = None,
    ) -> None:
        self._beater = beater_for(factory, interval)
        self._ti_id, self._attempt_id, self._on_lost = ti_id, attempt_id, on_lost

    def __enter__(self) -> Heartbeat:
        self._beater.add(self._ti_id, self._attempt_id, self._on_lost)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._beater.remove(self._ti_id)
