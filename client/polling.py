"""How `wait` paces its reads of a run: the first again after 0.1 s, each pause half as
long again as the one before, at most `interval`, and never past the deadline. Both
clients use it; only the sleep differs (`time.sleep`, `asyncio.sleep`)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from sluice.client.models import Run

FIRST_PAUSE = 0.1
GROWTH = 1.5


@dataclass
class Pacing:
    """The pauses of one `wait`; `timeout` None waits without a deadline."""

    timeout: float | None
    interval: float
    started: float = field(default_factory=time.monotonic)
    pause: float = FIRST_PAUSE

    def __post_init__(self) -> None:
        if self.timeout is not None and not self.timeout >= 0:
            raise ValueError(f"timeout must be a number of seconds >= 0, got {self.timeout}")
        if not self.interval > 0:
            raise ValueError(f"poll_interval must be a number of seconds > 0, got {self.interval}")
        self.pause = min(self.pause, self.interval)

    def next_pause(self) -> float | None:
        """How long to sleep before the next read; None once the deadline has passed."""
        pause = self.pause
        self.pause = min(self.pause * GROWTH, self.interval)
        if self.timeout is None:
            return pause
        left = self.started + self.timeout - time.monotonic()
        return None if left <= 0 else min(pause, left)


def timed_out(run: Run, timeout: float | None) -> TimeoutError:
    """The error `wait` raises when `run` has not finished within `timeout` seconds."""
    return TimeoutError(
        f"run {run.run_id!r} of DAG {run.dag_id!r} is still {run.state} after {timeout} s"
    )
