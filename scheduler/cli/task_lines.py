"""The lines `sluice standalone` prints as its runs go: one per try that ends, in words.

    extract  success  0.04s
    total    up_for_retry  0.01s  try 1 of 2 failed, retrying in 5.00s: ValueError: no rows
    alert    skipped

They are read from the database, not told by the worker: a thread of the standalone
process reads, every `INTERVAL` seconds, the TIs of the runs it watches that ended since
its last read (`core.queries.task_changes`; a try whose TI was reopened before a read,
a retry due at once, from `task_try`). So every writer's moves show the same way (a
worker's result, a scheduler's `skipped` or `upstream_failed`, a sweep's failure, a
user's mark), and the worker's result path, in standalone or in any other deployment,
does nothing more. With `--trigger` it watches that run; without, every run that is
unfinished or new since its start, each line naming its DAG and run, and a line when a
run ends.

Invariants:
- Each (TI, try, state) is printed once. A row committed up to `LATE_COMMIT` seconds
  after the `end_date` its writer stamped is still seen; tries that ended before the
  watch began are not printed.
- A read that fails (the database busy, or gone a moment) is skipped: the next one
  catches up. A read never takes longer than a twentieth of the time between two.
- `stop()` reads once more after the thread has ended: every try that ended before it
  is printed before the command prints its result.
"""

from __future__ import annotations

import datetime as dt
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, TextIO

from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker

from sluice.scheduler.cli.render import visible
from sluice.scheduler.cli.timefmt import seconds_text, when
from sluice.scheduler.core.db import utcnow
from sluice.scheduler.core.queries.task_changes import (
    ENDED,
    last_run_id,
    runs_to_watch,
    tis_by_id,
    tis_ended_since,
    tries_reopened_since,
)
from sluice.scheduler.core.states import RUN_TERMINAL, TI

log = logging.getLogger(__name__)

INTERVAL = 0.25
"""Seconds between two reads (more if a read is slow: see `COST_SHARE`)."""
COST_SHARE = 20
"""A read's time is at most 1/COST_SHARE of the time between two reads."""
LATE_COMMIT = 30.0
"""Seconds a try's row may be committed after the `end_date` its writer stamped (a
scheduler's pass stamps the time it began) and still be printed."""
SHORTEST_RETRY_DELAY = 0.5
"""A retry due sooner than this after its failure is said as "retrying", no delay."""


def line_for(row: Any, width: int = 0) -> str:
    """One try's end in words: its task (with `[i]` for a mapped index) padded to
    `width`, its state, how long it ran, and for a failure what it raised and what
    comes next."""
    key = visible(row.task_id if row.map_index < 0 else f"{row.task_id}[{row.map_index}]")
    parts = [f"{key:<{width}}", f"{row.state:<7}"]
    if row.start_date is not None and row.end_date is not None:
        parts.append(seconds_text((row.end_date - row.start_date).total_seconds()))
    error = visible(row.error) if row.error else ""
    if row.state == TI.UP_FOR_RETRY:
        said = f"try {row.try_number} of {row.max_tries} failed, {_retrying(row)}"
        parts.append(f"{said}: {error}" if error else said)
    elif row.state == TI.UP_FOR_RESCHEDULE and row.next_retry_at is not None:
        at = row.next_retry_at
        parts.append(f"poke again at {when(at, row.end_date or at)}")
    elif row.state == TI.FAILED and error:
        tries = f"try {row.try_number} of {row.max_tries}: " if row.max_tries > 1 else ""
        parts.append(f"{tries}{error}")
    return "  ".join(parts).rstrip()


def _retrying(row: Any) -> str:
    if row.next_retry_at is None or row.end_date is None:
        return "retrying"
    delay = (row.next_retry_at - row.end_date).total_seconds()
    return "retrying" if delay < SHORTEST_RETRY_DELAY else f"retrying in {seconds_text(delay)}"


class TaskLines:
    """Watches runs and prints a line for each try that ends (see the module).

    `run_pk`: the one run to watch (its lines name only the task); None: every run
    unfinished or new since the watch began (each line names its DAG and run).
    `task_ids`: the tasks of the watched run, to align its lines from the first.
    """

    def __init__(
        self,
        factory: sessionmaker[Session],
        *,
        run_pk: int | None = None,
        task_ids: Iterable[str] = (),
        out: TextIO | None = None,
        clock: Callable[[], dt.datetime] = utcnow,
    ) -> None:
        self.factory = factory
        self.run_pk = run_pk
        self.out = out
        self.clock = clock
        self._width = max((len(visible(t)) for t in task_ids), default=0)
        self._floor = clock()
        self._since = self._floor
        self._seen: dict[tuple[int, int, str], dt.datetime] = {}
        self._after_id: int | None = None
        self._watched: dict[int, float] = {}
        """Run id → when (monotonic) it was last seen unfinished or new."""
        self._names: dict[int, str] = {}
        self._ended: set[int] = set()
        """Runs whose end was said (a run queued again is said again when it ends)."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the thread --------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="sluice-task-lines", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """End the thread, then read once more (the last tries' lines)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.poll()

    def _loop(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            self.poll()
            self._stop.wait(max(INTERVAL, COST_SHARE * (time.monotonic() - began)))

    # -- one read ----------------------------------------------------------------------------
    def poll(self) -> list[str]:
        """Read what ended since the last read; print and return its lines (none if the
        read failed)."""
        now = self.clock()
        try:
            with self.factory() as session:
                lines = self._read(session)
        except DBAPIError as exc:
            log.debug("reading the tries that ended failed: %s", exc)
            return []
        self._since = max(self._floor, now - dt.timedelta(seconds=LATE_COMMIT))
        self._seen = {key: end for key, end in self._seen.items() if end >= self._since}
        out = self.out or sys.stderr
        for line in lines:
            # one write a line: print() writes the newline apart, and a log record of
            # another thread (the embedded worker's, with -v) could land between the two
            out.write(line + "\n")
            out.flush()
        return lines

    def _read(self, session: Session) -> list[str]:
        run_ends: list[str] = []
        if self.run_pk is not None:
            runs: set[int] = {self.run_pk}
        else:
            run_ends = self._look_at_runs(session)
            runs = set(self._watched)
        keys = [
            (r.id, r.try_number, str(r.state)) for r in tis_ended_since(session, runs, self._since)
        ]
        read = [
            *tis_by_id(session, {key[0] for key in keys if key not in self._seen}),
            *tries_reopened_since(session, runs, self._since),
        ]
        # a TI may have moved on since its key was read: its try is read from task_try next
        ended = [r for r in read if r.state in ENDED and r.end_date is not None]
        lines = []
        for row in sorted(ended, key=lambda r: (r.end_date, r.try_number, r.id)):
            key = (row.id, row.try_number, str(row.state))
            if key in self._seen:
                continue
            self._seen[key] = row.end_date
            self._width = max(self._width, len(visible(row.task_id)) + _index_width(row))
            line = line_for(row, self._width)
            if self.run_pk is None:
                line = f"{self._names.get(row.dag_run_id, '')}  {line}"
            lines.append(line)
        return lines + run_ends

    def _look_at_runs(self, session: Session) -> list[str]:
        """Standalone without `--trigger`: update the runs watched; a line for each run
        that ended since the last read."""
        if self._after_id is None:
            self._after_id = last_run_id(session)
        clock = time.monotonic()
        ends = []
        for run in runs_to_watch(session, after_id=self._after_id, also=list(self._watched)):
            self._names[run.id] = visible(f"{run.dag_id} {run.run_id}")
            self._after_id = max(self._after_id, run.id)
            if run.state not in RUN_TERMINAL:
                self._watched[run.id] = clock
                self._ended.discard(run.id)
                continue
            self._watched.setdefault(run.id, clock)
            if run.id not in self._ended:
                self._ended.add(run.id)
                ends.append(f"run {self._names[run.id]}: {run.state}")
        for run_id, seen in list(self._watched.items()):
            if clock - seen > LATE_COMMIT:
                del self._watched[run_id]
                self._names.pop(run_id, None)
                self._ended.discard(run_id)
        return ends


def _index_width(row: Any) -> int:
    return 0 if row.map_index < 0 else len(f"[{row.map_index}]")
