"""Secrets backends of other packages: entry points of the group `sluice.secrets_backends`
(the interface is `tasks.secrets.SecretsBackend`), enabled by name and in order by
`SLUICE_SECRETS_BACKENDS`.

A backend is loaded once per process, on the first lookup that reaches it (a worker whose
tasks read no connection loads none); a name no installed package provides, or an entry
point that does not load or gives no backend, is a `ConfigError` (one line).
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass
from importlib.metadata import entry_points

from sluice.scheduler.core.settings import ConfigError, Settings
from sluice.tasks.secrets import ENTRY_POINT_GROUP, SecretsBackend


@dataclass(frozen=True)
class Installed:
    """An entry point of the group: its name, what it loads, and whether it is enabled."""

    name: str
    target: str
    enabled: bool


def installed(settings: Settings) -> list[Installed]:
    """Every backend installed, by name, then each one enabled that is not installed
    (target "")."""
    found = {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}
    enabled = set(settings.secrets_backends)
    listed = [Installed(name, found[name], name in enabled) for name in sorted(found)]
    missing = [Installed(name, "", True) for name in settings.secrets_backends if name not in found]
    return listed + missing


_lock = threading.Lock()


def enabled_backends(settings: Settings) -> tuple[SecretsBackend, ...]:
    """The backends `settings.secrets_backends` names, in its order, loaded once."""
    if not settings.secrets_backends:
        return ()
    with _lock:
        return _loaded(settings.secrets_backends)


@functools.lru_cache(maxsize=4)
def _loaded(names: tuple[str, ...]) -> tuple[SecretsBackend, ...]:
    points = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
    backends = []
    for name in names:
        point = points.get(name)
        if point is None:
            there = ", ".join(sorted(points)) or "none"
            raise ConfigError(
                f"SLUICE_SECRETS_BACKENDS names {name!r}, which no installed package provides "
                f"in the entry point group {ENTRY_POINT_GROUP} (installed: {there})"
            )
        try:
            backend = point.load()()
        except Exception as exc:
            raise ConfigError(
                f"secrets backend {name!r} ({point.value}) failed to load: "
                f"{type(exc).__name__}: {exc}"
            ) from None
        if not callable(getattr(backend, "get_connection", None)) or not callable(
            getattr(backend, "get_variable", None)
        ):
            raise ConfigError(
                f"secrets backend {name!r} ({point.value}) has no get_connection(name) and "
                "get_variable(key)"
            )
        backends.append(backend)
    return tuple(backends)
