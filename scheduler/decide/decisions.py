"""What a run's decision reads of each TaskInstance (`TiView`) and what it decides
(`Decisions`: the moves, and the mapped tasks to expand, each an `Expansion`).

A module of its own, below the code that decides (`deps`, `mapped`, `run_decision`) and
the code that writes a decision (`dagrun`, `expanding`): plain data, no database.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from sluice.scheduler.core.states import TaskInstanceState


@dataclass(frozen=True)
class TiView:
    """What the decision needs of one TaskInstance."""

    id: int
    task_id: str
    state: TaskInstanceState
    next_retry_at: dt.datetime | None = None
    result: str | None = None
    map_index: int = -1


@dataclass(frozen=True)
class Expansion:
    """A mapped task's TIs to bring to exactly `indexes` (the rest of its `none` TIs
    `removed`), scheduling `schedule` among them at once."""

    task_id: str
    tis: tuple[TiView, ...]
    indexes: tuple[int, ...]
    schedule: tuple[int, ...] = ()


@dataclass
class Decisions:
    """Target state → ids of the TIs to move there (all from `none` or `up_for_retry`)."""

    moves: dict[TaskInstanceState, list[int]] = field(default_factory=dict)
    retries: list[int] = field(default_factory=list)
    expansions: list[Expansion] = field(default_factory=list)
    """Mapped tasks to give their indexes (`scheduling.mapped`), written before the moves."""
    errors: dict[int, str] = field(default_factory=dict)
    """The error of each TI moved to `failed` (a mapped task that cannot expand)."""

    def add(self, state: TaskInstanceState, ti_id: int) -> None:
        self.moves.setdefault(state, []).append(ti_id)
