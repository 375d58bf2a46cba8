"""What a wake-up carries: its payload (`payload_of`: a run id with news, or `*`) and the
news a waker gathers until its scheduler takes them (`News`).

A module of its own, shared by the Redis waker (`wakeup`) and PostgreSQL's
(`pg_wakeup`): neither imports the other for it.
"""

from __future__ import annotations

import threading
from collections.abc import Collection

from sluice.broker.untrusted import dropped, parse_run_id


class News:
    """Run ids named by wake-ups, gathered until taken (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: set[int] = set()
        self._everything = True  # until the first take, look at everything

    def add(self, payload: bytes | str | None, where: str = "a wake-up") -> bool:
        """A wake-up's payload: a run id, `*` or None (look at everything); whether it was
        one. Anything else is junk from whoever can write to the broker: dropped
        (`untrusted.dropped`), and it wakes nothing."""
        if payload is None or payload in (b"*", "*"):
            with self._lock:
                self._everything = True
            return True
        run_id = parse_run_id(payload)
        if run_id is None:
            dropped("a wake-up that names no run", where, payload, "not a run id nor '*'")
            return False
        with self._lock:
            self._runs.add(run_id)
        return True

    def add_runs(self, run_ids: Collection[int]) -> None:
        """News of these runs (a batch kept here rather than shared)."""
        with self._lock:
            self._runs.update(run_ids)

    def take(self) -> set[int] | None:
        with self._lock:
            runs, everything = self._runs, self._everything
            self._runs, self._everything = set(), False
        return None if everything else runs


def payload_of(run_id: int | None) -> bytes:
    """A wake-up's payload: the run id with news, or `*` (look at everything)."""
    return b"*" if run_id is None else str(run_id).encode()
