"""Hard time limits: a body (a try's task, a callback) still running `grace` seconds after
its timeout is ended for good.

A timeout raises `TaskTimeout` inside the body (`tasks.runtime.call_with_timeout`); a body
that swallows it (`except BaseException`, a bare `except:`) or never gets back to Python
code goes on running. One daemon thread per process (`deadlines()`, started at the first
watch) ends it at its deadline: it calls the watch's `expire` with how the body ends,
which records the end (a compare-and-set), then

- in a prefork pool child (`mark_pool_child`, at Celery's `worker_process_init`) the
  process kills itself (SIGKILL), as Celery's own hard `time_limit` does from the pool's
  parent: billiard starts another process in its place, and the message (late ack,
  `task_reject_on_worker_lost`) comes back to a claim that loses;
- anywhere else (the threads pool, so `sluice standalone`'s embedded worker; the solo
  pool; a local backfill) nothing can kill a thread: the body is abandoned, running on,
  and whatever it returns is not recorded.

Invariants: a watch's `expire` and its body's end (`Watch.done`) exclude each other (the
watch's lock), so exactly one of them records the end. A body that returns after `expire`
took it records nothing, and in a pool child it never returns to Celery: `done` waits
under the lock while `expire` records and the process is killed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from enum import Enum

from sluice.tasks.errors import TaskStopped

log = logging.getLogger(__name__)


class Ending(Enum):
    """How an overdue body ends; `note` is what its recorded error says of it."""

    KILLED = "killed"
    ABANDONED = "abandoned: a thread cannot be killed"

    @property
    def note(self) -> str:
        return str(self.value)


class Expired(TaskStopped):
    """Raised where an overdue body ends after all: its end was recorded as overdue
    (`Watch.done` returned False), so nothing more is to be recorded."""


Expire = Callable[[Ending], None]
"""Records the end of an overdue body (called once, from the deadlines' thread)."""

_pool_child = False


def mark_pool_child() -> None:
    """This process is a prefork pool child: an overdue body is ended by killing it."""
    global _pool_child
    _pool_child = True


def ending() -> Ending:
    """How an overdue body of this process ends."""
    return Ending.KILLED if _pool_child else Ending.ABANDONED


class Watch:
    """The hard limit of one running body."""

    def __init__(self, deadline: float, expire: Expire, what: str) -> None:
        self.deadline = deadline
        self.what = what
        self._expire = expire
        self._lock = threading.Lock()
        self._ended = False
        self._expired = False

    def done(self) -> bool:
        """The body ended: True if its end is its own to record, False if `expire` took it
        (then the body's result is not to be recorded). Waits while `expire` runs."""
        with self._lock:
            if self._expired:
                return False
            self._ended = True
            return True

    def _fire(self, how: Ending) -> bool:
        """Expire the body unless it ended; whether it was expired."""
        with self._lock:
            if self._ended:
                return False
            self._expired = True
            try:
                self._expire(how)
            except Exception as exc:  # the end is recorded by the sweep then
                log.warning("recording the end of overdue %s failed: %s", self.what, exc)
            if how is Ending.KILLED:
                log.warning(
                    "%s still runs past its timeout and grace: killing this pool process "
                    "(pid %s); the pool starts another",
                    self.what,
                    os.getpid(),
                )
                os.kill(os.getpid(), signal.SIGKILL)
            return True


class Deadlines:
    """The watches of one process, ended at their deadlines by one daemon thread (started
    with the object: see `deadlines`)."""

    def __init__(self) -> None:
        self._watches: dict[int, Watch] = {}
        self._wake = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="sluice-time-limits", daemon=True)
        self._thread.start()

    def watch(self, seconds: float, expire: Expire, what: str) -> Watch:
        """Watch a body that must end within `seconds`; call `done()` on the returned
        watch when it ends (`expire` is called instead if it has not by then)."""
        watch = Watch(time.monotonic() + seconds, expire, what)
        with self._wake:
            self._watches[id(watch)] = watch
            self._wake.notify()
        return watch

    def forget(self, watch: Watch) -> None:
        """Stop watching (the body ended)."""
        with self._wake:
            self._watches.pop(id(watch), None)

    def _run(self) -> None:
        while True:
            with self._wake:
                overdue = self._overdue()
                while not overdue:
                    self._wake.wait(self._until_next())
                    overdue = self._overdue()
                for watch in overdue:
                    del self._watches[id(watch)]
            for watch in overdue:
                watch._fire(ending())

    def _overdue(self) -> list[Watch]:
        now = time.monotonic()
        return [w for w in self._watches.values() if w.deadline <= now]

    def _until_next(self) -> float | None:
        if not self._watches:
            return None
        return max(0.0, min(w.deadline for w in self._watches.values()) - time.monotonic())


_deadlines: dict[int, Deadlines] = {}
_deadlines_lock = threading.Lock()


def deadlines() -> Deadlines:
    """This process's deadlines (a forked child gets its own, and its own thread). The
    first call starts the thread: make it outside a try's log capture, whose threads
    started there write into that try's log (`task_logs`)."""
    pid = os.getpid()
    with _deadlines_lock:
        found = _deadlines.get(pid)
        if found is None:
            found = _deadlines[pid] = Deadlines()
        return found


@contextlib.contextmanager
def hard_limit(seconds: float, expire: Expire, what: str) -> Iterator[Watch]:
    """The block is a body that must end within `seconds`, or `expire` records its end
    and it is ended (see the module doc). A block that ends after that raises `Expired`
    (in place of whatever it raised or returned)."""
    limits = deadlines()
    watch = limits.watch(seconds, expire, what)
    try:
        yield watch
    finally:
        limits.forget(watch)
        if not watch.done():
            raise Expired(f"{what} ended after its end was recorded as overdue")
