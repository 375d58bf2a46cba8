"""Heartbeats of running tries and callbacks: one daemon thread per worker process beats
them all.

A liveness write, not a state move: `UPDATE task_instance SET last_heartbeat_at
WHERE (id, attempt_id) IN (…) AND state = 'running' RETURNING id`, and the same for the
running callbacks on `callback` (`(id, token)`, `core.queries.callbacks.beat_callbacks`),
in one short transaction per beat for everything this process runs. A try that no longer
matches has lost its running state to someone else (its run cancelled, the TI marked,
cleared, timed out or swept), a callback its claim (taken for lost and published again):
the beat stops it (its `on_lost`, `runtime.Stop.stop`), whatever the pool, so it ends
within one heartbeat interval even if the revoke broadcast never reached this worker. A
beat that fails (the database unreachable) stops nothing: errors are logged and the next
beat tries again. Registering costs a dict insert, not a thread start.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Any, Literal

from sqlalchemy import tuple_, update
from sqlalchemy.orm import Session, sessionmaker

from sluice.scheduler.core.db import transaction, utcnow
from sluice.scheduler.core.models import TaskInstance
from sluice.scheduler.core.queries.callbacks import beat_callbacks
from sluice.scheduler.core.states import TI

log = logging.getLogger(__name__)


OnLost = Callable[[str], None]
"""Called once, from the heartbeat thread, with why a try (or a callback) is to stop."""

LOST = "the try is no longer running (its run cancelled, or the TI marked, cleared or timed out)"
LOST_CALLBACK = "the callback is no longer this worker's (taken for lost and published again)"

Kind = Literal["try", "callback"]
Key = tuple[Kind, int]
"""What beats: ("try", ti_id) or ("callback", callback_id)."""


class Beater:
    """Beats every registered try (ti_id, attempt_id) and callback (callback_id, token)
    each `interval` seconds."""

    def __init__(self, factory: sessionmaker[Session], interval: float) -> None:
        self._factory = factory
        self._interval = interval
        self._running: dict[Key, str] = {}
        self._on_lost: dict[Key, OnLost] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def add(self, key: Key, token: str, on_lost: OnLost | None = None) -> None:
        """Beat for `key` while it runs on `token` (a try's attempt id, a callback's token)."""
        with self._lock:
            self._running[key] = token
            if on_lost is not None:
                self._on_lost[key] = on_lost
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="sluice-heartbeat", daemon=True
                )
                self._thread.start()

    def remove(self, key: Key) -> None:
        with self._lock:
            self._running.pop(key, None)
            self._on_lost.pop(key, None)

    def _run(self) -> None:
        stop = threading.Event()
        while not stop.wait(self._interval):
            with self._lock:
                running = list(self._running.items())
            if not running:
                continue
            try:
                beaten = self.beat(running)
            except Exception as exc:
                log.warning(
                    "heartbeat of %d running tries and callbacks failed: %s", len(running), exc
                )
                continue
            self._stop_lost(running, beaten)

    def beat(self, running: list[tuple[Key, str]]) -> set[Key]:
        """One beat for `running`; returns the keys still running on their token."""
        tries = [(key[1], token) for key, token in running if key[0] == "try"]
        callbacks = [(key[1], token) for key, token in running if key[0] == "callback"]
        beaten: set[Key] = set()
        with transaction(self._factory) as session:
            if tries:
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
                beaten.update(("try", ti_id) for ti_id in result.scalars())
            if callbacks:
                ids = beat_callbacks(session, callbacks, utcnow())
                beaten.update(("callback", callback_id) for callback_id in ids)
        return beaten

    def _stop_lost(self, running: list[tuple[Key, str]], beaten: set[Key]) -> None:
        """Stop what of `running` is not in `beaten` and is still registered on the same
        token (one that ended during the beat is not stopped)."""
        for key, token in running:
            if key in beaten:
                continue
            with self._lock:
                if self._running.get(key) != token:
                    continue
                on_lost = self._on_lost.pop(key, None)
            if on_lost is not None:
                kind, key_id = key
                if kind == "try":
                    log.warning("try %s of TI %s is no longer running: stopping it", token, key_id)
                    on_lost(LOST)
                else:
                    log.warning("callback %s is no longer this worker's: stopping it", key_id)
                    on_lost(LOST_CALLBACK)


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
    """Context manager: a try (or, `for_callback`, a callback) beats while the block runs."""

    def __init__(
        self,
        factory: sessionmaker[Session],
        interval: float,
        ti_id: int,
        attempt_id: str,
        on_lost: OnLost | None = None,
        *,
        kind: Kind = "try",
    ) -> None:
        self._beater = beater_for(factory, interval)
        self._key: Key = (kind, ti_id)
        self._token, self._on_lost = attempt_id, on_lost

    @classmethod
    def for_callback(
        cls,
        factory: sessionmaker[Session],
        interval: float,
        callback_id: int,
        token: str,
        on_lost: OnLost | None = None,
    ) -> Heartbeat:
        """The heartbeat of a running callback, on its claim's token."""
        return cls(factory, interval, callback_id, token, on_lost, kind="callback")

    def __enter__(self) -> Heartbeat:
        self._beater.add(self._key, self._token, self._on_lost)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._beater.remove(self._key)
