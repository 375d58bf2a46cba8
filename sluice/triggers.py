"""The built-in triggers a deferred task waits on (`sluice.defer`): `Sleep`, `Until`,
`FileExists`. They live in `sluice.tasks.triggers`, with the `Trigger` base class."""

from __future__ import annotations

from sluice.tasks.triggers import FileExists, Sleep, Trigger, TriggerEvent, Until

__all__ = ["FileExists", "Sleep", "Trigger", "TriggerEvent", "Until"]
