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

Self-fencing: a second thread (`sluice-fence`) watches how long ago this process last
reached the database (the start of its last beat that committed, or the registration of
what runs, whichever is later). Past `fence_after` (half of SLUICE_HEARTBEAT_TIMEOUT), it
stops every registered try and callback with `FENCED`, before the schedulers' sweep may
hand them to another worker (a full heartbeat timeout after the last beat): two tries of
one TI never run at once, with sane clocks. It is a thread of its own because a beat may
hang on a link that holds its bytes. A fenced try records nothing (`runner`): the sweep
takes it, as it takes a dead worker's.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any, Literal

from sqlalchemy import select, tuple_, update
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
FENCED = (
    "this worker could not reach the database for over half of SLUICE_HEARTBEAT_TIMEOUT: "
    "stopped before another worker may take the try over"
)

Kind = Literal["try", "callback"]
Key = tuple[Kind, int]
"""What beats: ("try", ti_id) or ("callback", callback_id)."""


class Beater:
    """Beats every registered try (ti_id, attempt_id) and callback (callback_id, token)
    each `interval` seconds, and fences them (`FENCED`) when no beat reached the database
    for `fence_after` seconds (None: never)."""

    def __init__(
        self, factory: sessionmaker[Session], interval: float, fence_after: float | None = None
    ) -> None:
        self._factory = factory
        self._interval = interval
        self._fence_after = fence_after
        self._running: dict[Key, str] = {}
        self._on_lost: dict[Key, OnLost] = {}
        self._since: dict[Key, float] = {}
        """When each key was registered (time.monotonic): the claim reached the database."""
        self._reached = float("-inf")
        """When the last beat that committed started (time.monotonic)."""
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def add(self, key: Key, token: str, on_lost: OnLost | None = None) -> None:
        """Beat for `key` while it runs on `token` (a try's attempt id, a callback's token)."""
        with self._lock:
            self._running[key] = token
            self._since[key] = time.monotonic()
            if on_lost is not None:
                self._on_lost[key] = on_lost
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="sluice-heartbeat", daemon=True
                )
                self._thread.start()
                if self._fence_after is not None:
                    threading.Thread(target=self._fence, name="sluice-fence", daemon=True).start()

    def remove(self, key: Key) -> None:
        with self._lock:
            self._running.pop(key, None)
            self._on_lost.pop(key, None)
            self._since.pop(key, None)

    def _run(self) -> None:
        stop = threading.Event()
        while not stop.wait(self._interval):
            with self._lock:
                running = list(self._running.items())
            if not running:
                continue
            started = time.monotonic()
            try:
                beaten = self.beat(running)
            except Exception as exc:
                log.warning(
                    "heartbeat of %d running tries and callbacks failed: %s", len(running), exc
                )
                continue
            with self._lock:
                self._reached = max(self._reached, started)
            self._stop_lost(running, beaten)

    def _fence(self) -> None:
        """Stop, with `FENCED`, what has not reached the database for `fence_after`."""
        assert self._fence_after is not None
        every = min(self._interval, self._fence_after / 4)
        stop = threading.Event()
        while not stop.wait(every):
            for key, silent, on_lost in self.out_of_reach(time.monotonic()):
                kind, key_id = key
                log.error(
                    "%s %s has not reached the database for %.1fs (over %gs, half of "
                    "SLUICE_HEARTBEAT_TIMEOUT): stopping what of it still runs before another "
                    "worker may take it over",
                    "TI" if kind == "try" else "callback",
                    key_id,
                    silent,
                    self._fence_after,
                )
                on_lost(FENCED)

    def out_of_reach(self, now: float) -> list[tuple[Key, float, OnLost]]:
        """The registered keys silent for over `fence_after` at `now` (how long, and
        their stop, taken out: each is fenced once)."""
        assert self._fence_after is not None
        fenced: list[tuple[Key, float, OnLost]] = []
        with self._lock:
            for key, since in self._since.items():
                silent = now - max(since, self._reached)
                if silent > self._fence_after and key in self._on_lost:
                    fenced.append((key, silent, self._on_lost.pop(key)))
        return fenced

    def beat(self, running: list[tuple[Key, str]]) -> set[Key]:
        """One beat for `running`; returns the keys still running on their token."""
        tries = [(key[1], token) for key, token in running if key[0] == "try"]
        callbacks = [(key[1], token) for key, token in running if key[0] == "callback"]
        beaten: set[Key] = set()
        with transaction(self._factory) as session:
            if tries:
                beaten.update(("try", ti_id) for ti_id in beat_tries(session, tries, utcnow()))
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


def beat_tries(session: Session, tries: list[tuple[int, str]], now: dt.datetime) -> set[int]:
    """`last_heartbeat_at` of the (ti_id, attempt_id) tries still `running`; the ids of
    those still running. A row locked by another transaction (this try's own result
    waiting on its run's lock, a sweep about to end it) is skipped, never waited on, and
    counted as running by a plain read: a beat never hangs on a lock, and the next beat
    finds what the lock's holder did."""
    keys = tuple_(TaskInstance.id, TaskInstance.attempt_id).in_(tries)
    running = TaskInstance.state == TI.RUNNING
    free = select(TaskInstance.id).where(keys, running).with_for_update(skip_locked=True)
    beaten = set(
        session.scalars(
            update(TaskInstance)
            .where(TaskInstance.id.in_(free.scalar_subquery()))
            .values(last_heartbeat_at=now)
            .returning(TaskInstance.id)
            .execution_options(synchronize_session=False)
        )
    )
    if len(beaten) < len(tries):
        beaten.update(session.scalars(select(TaskInstance.id).where(keys, running)))
    return beaten


_beaters: dict[tuple[int, int], Beater] = {}
_beaters_lock = threading.Lock()


def beater_for(
    factory: sessionmaker[Session], interval: float, fence_after: float | None = None
) -> Beater:
    """This process's beater for `factory` (a forked child gets its own; the first
    call's `interval` and `fence_after` hold for the process)."""
    key = (os.getpid(), id(factory))
    with _beaters_lock:
        beater = _beaters.get(key)
        if beater is None:
            beater = _beaters[key] = Beater(factory, interval, fence_after)
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
        fence_after: float | None = None,
    ) -> None:
        self._beater = beater_for(factory, interval, fence_after)
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
        fence_after: float | None = None,
    ) -> Heartbeat:
        """The heartbeat of a running callback, on its claim's token."""
        return cls(
            factory, interval, callback_id, token, on_lost, kind="callback", fence_after=fence_after
        )

    def __enter__(self) -> Heartbeat:
        self._beater.add(self._key, self._token, self._on_lost)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._beater.remove(self._key)
