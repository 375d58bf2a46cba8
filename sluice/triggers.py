"""The built-in triggers a deferred task waits on (`sluice.defer`): `Sleep`, `Until`,
`FileExists`, `RunFinished` (another run's end), `CreateRun` (a run of another DAG,
created by the triggerers: what `TriggerDagRun` defers on) and `Event` (an event sent on a
key: `sluice events send`, an approval in the UI). They live in `sluice.tasks.triggers`,
with the `Trigger` base class."""

from __future__ import annotations

from sluice.tasks.triggers import (
    CreateRun,
    Event,
    FileExists,
    RunFinished,
    Sleep,
    Trigger,
    TriggerEvent,
    Until,
)

__all__ = [
    "CreateRun",
    "Event",
    "FileExists",
    "RunFinished",
    "Sleep",
    "Trigger",
    "TriggerEvent",
    "Until",
]
