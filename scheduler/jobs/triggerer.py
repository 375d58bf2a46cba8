"""`sluice triggerer`: runs the triggers deferred TIs wait on, up to `capacity` at once, on
one asyncio loop (a thread of its own), and resumes or fails each TI when its trigger ends.

Each tick of the main thread (its own short transactions): every heartbeat interval,
heartbeat the `job` row, renew the leases of the triggers it runs (a trigger another
triggerer took after a lapse is cancelled here) and drop trigger rows whose TI moved
meanwhile; ask what waits (`waiting_kinds`: an idle tick is that one query); fail the
TIs whose trigger timed out; lease new triggers up to the capacity (`FOR UPDATE SKIP
LOCKED`) and start them on the loop; then record what the loop reported: a first event
resumes its TI (`deferred -> scheduled`, one compare-and-set on the trigger's attempt),
an exception fails it (retries apply), and the schedulers are woken.

`Event`, `RunFinished` and `CreateRun` triggers are not leased nor run: at each tick every
triggerer resumes the TIs whose `Event` an event stored since their run was queued fires
(`queries.events`: one that deferred while the event was being sent is not missed), those
whose awaited run ended (`queries.run_waits`), and those whose run of another DAG it has
just created (`scheduling.triggered_runs`, `TriggerDagRun`'s), and fails those past their
timeout or refused; each resume or failure is one compare-and-set, and the rows are taken
`SKIP LOCKED`, so triggerers share them.

The watches of watched DAGs (`sluice.Watch`) are evaluated by `jobs.watcher`, in a
thread of its own (each evaluation a subprocess).

A trigger is user code: it runs in this process only, never in a scheduler's. One that
blocks the loop is named in a warning (`SLOW_CALLBACK`, `_watch_the_loop`).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import queue
import sys
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from sluice.broker.wakeup import Waker
from sluice.scheduler.core.db import transaction, utcnow
from sluice.scheduler.core.models import Job, Trigger
from sluice.scheduler.core.queries.events import resume_pending, timed_out_events
from sluice.scheduler.core.queries.jobs import add_job
from sluice.scheduler.core.queries.run_waits import ended_runs_waited_on
from sluice.scheduler.core.queries.triggers import (
    drop_orphans,
    fail_deferred,
    lease_triggers,
    renew_leases,
    resume,
    waiting_kinds,
)
from sluice.scheduler.core.settings import Settings
from sluice.scheduler.core.states import JobState
from sluice.scheduler.core.text import one_line
from sluice.scheduler.jobs.periodic import Every
from sluice.scheduler.jobs.watcher import Watcher
from sluice.scheduler.scheduling.triggered_runs import create_awaited_runs
from sluice.tasks.triggers import (
    CREATE_RUN_CLASSPATH,
    EVENT_CLASSPATH,
    RUN_FINISHED_CLASSPATH,
    rebuild,
)

log = logging.getLogger(__name__)

SLOW_CALLBACK = 0.5
"""Seconds a trigger may hold the loop before asyncio names it in a warning."""
TICK = 0.2
"""Seconds between two ticks of the main thread when nothing happened."""


@dataclass(frozen=True)
class Ended:
    """What the loop reports of a trigger: its first event's payload, or its error."""

    trigger_id: int
    payload: Any = None
    error: str | None = None


class TriggererJob:
    job_type = "triggerer"

    def __init__(
        self,
        settings: Settings,
        factory: sessionmaker[Session],
        waker: Waker,
        *,
        capacity: int = 1000,
    ) -> None:
        self.settings = settings
        self.factory = factory
        self.waker = waker
        self.capacity = capacity
        self.job_id: int | None = None
        self.running: dict[int, tuple[Trigger, Future[None]]] = {}
        self.ended: queue.SimpleQueue[Ended] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="sluice-triggers", daemon=True
        )
        self._names: dict[asyncio.Task[Any], str] = {}
        """The trigger each of the loop's tasks runs (its class path), for the warning."""
        self._lease = settings.heartbeat_timeout
        self._beats = Every(settings.heartbeat_interval)
        """When the job's heartbeat and the leases' renewal are due."""

    # -- life ----------------------------------------------------------------------------
    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    @stopping.setter
    def stopping(self, value: bool) -> None:
        """Set by a signal handler: the loop ends after this tick."""
        if value:
            self._stop.set()

    def run(self, num_loops: int | None = None) -> None:
        for folder in self._folders():  # a trigger's module may sit beside the DAG files
            if folder not in sys.path:
                sys.path.insert(0, folder)
        self.register()
        self._thread.start()
        threading.Thread(target=self._watch_the_loop, name="sluice-loop-watch", daemon=True).start()
        watcher = Watcher(self.settings, self.factory, lambda: self.job_id, self.waker.wake)
        watcher.start()
        loops = 0
        try:
            while not self._stop.is_set() and (num_loops is None or loops < num_loops):
                busy = self.tick(utcnow())
                loops += 1
                if not busy:
                    self._stop.wait(TICK)
        finally:
            for _, future in self.running.values():
                future.cancel()
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
            watcher.stop()
            self.finish()

    def _folders(self) -> list[str]:
        return [str(b.path.resolve()) for b in self.settings.bundles if b.path is not None]

    def register(self) -> None:
        now = utcnow()
        with transaction(self.factory) as session:
            self.job_id = add_job(session, self.job_type, now, self.capacity)
        log.info("triggerer job %s started (capacity %d)", self.job_id, self.capacity)

    def finish(self) -> None:
        if self.job_id is None:
            return
        with transaction(self.factory) as session:
            session.execute(
                update(Job)
                .where(Job.id == self.job_id)
                .values(state=JobState.SUCCESS, end_date=utcnow())
            )
            # what it ran goes back at once, not a lease later
            session.execute(
                update(Trigger)
                .where(Trigger.triggerer_id == self.job_id)
                .values(triggerer_id=None, lease_until=None)
            )

    # -- one tick ------------------------------------------------------------------------
    def tick(self, now: dt.datetime) -> bool:
        """One round of the main thread; whether it did anything (then no sleep).

        The job's heartbeat, the leases' renewal and the orphans' drop happen every
        `SLUICE_HEARTBEAT_INTERVAL` (a lease lasts a heartbeat timeout); each tick asks
        once what waits (`waiting_kinds`) and looks only for that: an idle triggerer
        costs one query a tick."""
        assert self.job_id is not None
        with transaction(self.factory) as session:
            if self._beats.take(now):
                session.execute(
                    update(Job).where(Job.id == self.job_id).values(latest_heartbeat=now)
                )
                held = renew_leases(session, self.job_id, list(self.running), now, self._lease)
                drop_orphans(session)
                for lost in set(self.running) - held:  # taken over after a lapse, or gone
                    self.running.pop(lost)[1].cancel()
            kinds, leasable = waiting_kinds(session, now)
        busy = self._time_out(now)
        if kinds:
            busy |= self._resolve_events(now, kinds)
        if RUN_FINISHED_CLASSPATH in kinds:
            busy |= self._resolve_run_waits(now)
        if CREATE_RUN_CLASSPATH in kinds:
            busy |= self._create_runs(now)
        if leasable:
            busy |= self._take_more(now)
        busy |= self._record_ended()
        return busy

    def _resolve_events(self, now: dt.datetime, kinds: frozenset[str]) -> bool:
        """Resume the TIs an event fires (`Event` triggers, if `kinds` has them), fail
        the engine's triggers past their timeout; whether any."""
        with transaction(self.factory) as session:
            resumed = resume_pending(session, now) if EVENT_CLASSPATH in kinds else []
            due = timed_out_events(session, now)
            for row in due:
                session.expunge(row)
        if resumed:
            log.info("TIs %s resumed by events", ", ".join(map(str, resumed)))
            self.waker.wake()
        for row in due:
            self._fail(row, "deferred task timed out waiting for its event", now)
        return bool(resumed or due)

    def _resolve_run_waits(self, now: dt.datetime) -> bool:
        """Resume the TIs whose awaited run ended as they wait for (`RunFinished`), fail
        those whose run ended otherwise; whether any."""
        with transaction(self.factory) as session:
            resumed, otherwise = ended_runs_waited_on(session, now)
        if resumed:
            log.info("TIs %s resumed by the runs they waited for", ", ".join(map(str, resumed)))
            self.waker.wake()
        for row, why in otherwise:
            self._fail(row, why, now)
        return bool(resumed or otherwise)

    def _create_runs(self, now: dt.datetime) -> bool:
        """Create the runs of other DAGs that TIs wait for (`CreateRun`, `TriggerDagRun`'s)
        and resume them, fail those refused; whether any."""
        with transaction(self.factory) as session:
            done = create_awaited_runs(
                session,
                now,
                max_conf_bytes=self.settings.max_conf_bytes,
                max_conf_depth=self.settings.max_conf_depth,
            )
        if done.created:
            log.info("runs %s created for deferred TIs", ", ".join(map(str, done.created)))
        if done.resumed:
            log.info("TIs %s resumed: their runs exist", ", ".join(map(str, done.resumed)))
        if done.created or done.resumed:
            self.waker.wake()  # names no run: a pass starts the queued runs
        for row, why in done.refused:
            self._fail(row, why, now)
        return bool(done.created or done.resumed or done.refused)

    def _take_more(self, now: dt.datetime) -> bool:
        assert self.job_id is not None
        room = self.capacity - len(self.running)
        if room <= 0:
            return False
        with transaction(self.factory) as session:
            taken = lease_triggers(session, self.job_id, room, now, self._lease)
            session.flush()  # the leases are written before the rows leave the session
            for row in taken:
                session.expunge(row)
        for row in taken:
            self.running[row.id] = (row, self._start(row))
        return bool(taken)

    def _start(self, row: Trigger) -> Future[None]:
        old = self.running.get(row.id)
        if old is not None:  # leased again after a lapse of its own lease: one run only
            old[1].cancel()
        return asyncio.run_coroutine_threadsafe(self._watch(row), self._loop)

    async def _watch(self, row: Trigger) -> None:
        """Run one trigger to its first event (or its error) and report it."""
        me = asyncio.current_task()
        if me is not None:
            self._names[me] = f"{row.classpath} of TI {row.ti_id}"
        try:
            trigger = rebuild(row.classpath, dict(row.kwargs))
            async for event in trigger.run():
                self.ended.put(Ended(row.id, payload=event.payload))
                return
            self.ended.put(Ended(row.id, error="the trigger ended without an event"))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            error = f"{type(exc).__name__}: {one_line(str(exc))}"
            self.ended.put(Ended(row.id, error=f"trigger {row.classpath} failed: {error}"))
        finally:
            if me is not None:
                self._names.pop(me, None)

    def _watch_the_loop(self) -> None:
        """A thread of its own: a loop that does not run a callback within
        `SLOW_CALLBACK` is blocked; the trigger whose task it is running is named."""
        while not self._stop.wait(SLOW_CALLBACK):
            ran = threading.Event()
            self._loop.call_soon_threadsafe(ran.set)
            if ran.wait(SLOW_CALLBACK):
                continue
            task = asyncio.current_task(self._loop)
            name = self._names.get(task) if task is not None else None
            log.warning(
                "the triggers' loop is blocked for over %gs by %s: a trigger must await, "
                "never block (no time.sleep in run())",
                SLOW_CALLBACK,
                name or "a trigger",
            )
            ran.wait()

    def _time_out(self, now: dt.datetime) -> bool:
        due = [
            row
            for row, _ in self.running.values()
            if row.timeout_at is not None and row.timeout_at <= now
        ]
        for row in due:
            self.running.pop(row.id)[1].cancel()
            self._fail(row, "deferred task timed out waiting for its trigger", now)
        return bool(due)

    def _record_ended(self) -> bool:
        any_ended = False
        while True:
            try:
                ended = self.ended.get_nowait()
            except queue.Empty:
                return any_ended
            any_ended = True
            entry = self.running.pop(ended.trigger_id, None)
            if entry is None:
                continue  # timed out or taken over meanwhile
            row = entry[0]
            now = utcnow()
            if ended.error is not None:
                self._fail(row, ended.error, now)
                continue
            with transaction(self.factory) as session:
                moved = resume(session, row, ended.payload, now)
            if moved:
                log.info("TI %s resumed by trigger %s", row.ti_id, row.classpath)
                self.waker.wake()

    def _fail(self, row: Trigger, error: str, now: dt.datetime) -> None:
        with transaction(self.factory) as session:
            new = fail_deferred(session, row, error, now)
        if new is not None:
            log.warning("TI %s %s: %s", row.ti_id, new, error)
            self.waker.wake()
