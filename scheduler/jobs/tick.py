"""What one pass of a job's loop did (`TickResult`): the loop reads whether to go on at
once (`busy`), the metrics count it. A module of its own, below both."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TickResult:
    """What one loop iteration did; `busy` asks for another iteration without waiting."""

    runs_created: int = 0
    runs_started: int = 0
    runs_examined: int = 0
    runs_finished: int = 0
    tis_scheduled: int = 0
    tis_queued: int = 0
    tis_requeued: int = 0
    dead_tis: int = 0
    dead_jobs: int = 0
    mapped_expansions: int = 0
    tis_expanded: int = 0
    more_runs: bool = False

    @property
    def busy(self) -> bool:
        return bool(self.runs_created or self.runs_finished or self.more_runs)
