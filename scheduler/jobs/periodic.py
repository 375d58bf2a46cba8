"""When a periodic step of a job's loop is due."""

from __future__ import annotations

import datetime as dt


class Every:
    """A step to run every `seconds`: `due` asks, `mark` records a run, `take` does both."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.last: dt.datetime | None = None

    def due(self, now: dt.datetime) -> bool:
        return self.last is None or (now - self.last).total_seconds() >= self.seconds

    def mark(self, now: dt.datetime) -> None:
        self.last = now

    def take(self, now: dt.datetime, *, force: bool = False) -> bool:
        """True (and recorded) when the step is due or forced."""
        if force or self.due(now):
            self.mark(now)
            return True
        return False
