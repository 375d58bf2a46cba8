"""What the scheduling code works out once per DAG version (a plan, a join, the roots of
a fresh run) and keeps in a process: `PerVersion`.

Its keys start with a DAG version hash. A version once replaced is never asked for
again, so the store is emptied when it reaches its size: each live key is then worked
out once more, and the store never grows past its size however many versions a
process meets. Reads and writes are single dict operations (atomic under the GIL); two
threads that miss the same key both work it out, the same value.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class PerVersion(Generic[K, V]):
    """Values by key, each worked out once by the `make` given to `get`; emptied at
    `size` entries."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._values: dict[K, V] = {}

    def get(self, key: K, make: Callable[[], V]) -> V:
        """The value of `key`, worked out by `make` on a miss (None is a value too)."""
        try:
            return self._values[key]
        except KeyError:
            pass
        value = make()
        if len(self._values) >= self._size:
            self._values.clear()
        self._values[key] = value
        return value

    def __len__(self) -> int:
        return len(self._values)
