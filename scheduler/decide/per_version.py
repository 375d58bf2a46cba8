"""What the scheduling code works out once per DAG version (a plan, a join, the roots of
a fresh run, a task order) and keeps in a process: `PerVersion`.

Its keys start with a DAG version hash. A version once replaced is never asked for
again, so it ages out: the store is a cachetools `LRUCache` of `size` entries, and never
grows past it however many versions a process meets. A value is worked out outside the
store's lock: two threads that miss the same key both work it out, the same value.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from cachetools import LRUCache

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class PerVersion(Generic[K, V]):
    """Values by key, each worked out once by the `make` given to `get`; the least
    recently used leaves first past `size` entries."""

    def __init__(self, size: int) -> None:
        self._values: LRUCache[K, V] = LRUCache(maxsize=size)
        self._lock = threading.Lock()

    def get(self, key: K, make: Callable[[], V]) -> V:
        """The value of `key`, worked out by `make` on a miss (None is a value too)."""
        with self._lock:
            if key in self._values:
                return self._values[key]
        value = make()
        with self._lock:
            self._values[key] = value
        return value

    def __len__(self) -> int:
        return len(self._values)
