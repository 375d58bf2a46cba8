"""`PerVersion`: a value worked out once per key, the least recently used leaving first."""

from __future__ import annotations

from sluice.scheduler.decide.per_version import PerVersion


def test_a_value_is_worked_out_once_and_none_is_kept_too() -> None:
    made: list[str] = []
    store: PerVersion[str, int | None] = PerVersion(8)

    def make(key: str, value: int | None) -> int | None:
        made.append(key)
        return value

    assert store.get("v1", lambda: make("v1", 3)) == 3
    assert store.get("v1", lambda: make("v1", 4)) == 3
    assert store.get("v2", lambda: make("v2", None)) is None
    assert store.get("v2", lambda: make("v2", 5)) is None
    assert made == ["v1", "v2"]


def test_the_store_never_grows_past_its_size() -> None:
    store: PerVersion[int, int] = PerVersion(3)
    for key in range(10):
        assert store.get(key, lambda k=key: k * 2) == key * 2  # type: ignore[misc]
        assert len(store) <= 3
    assert store.get(9, lambda: -1) == 18  # the last key survived the emptying


def test_the_least_recently_used_key_leaves_first_not_every_key() -> None:
    """A bounded cache through cachetools (issue 40, 4): a key in use survives a new
    version's arrival; the store is no longer emptied whole at its size."""
    store: PerVersion[str, int] = PerVersion(2)
    store.get("a", lambda: 1)
    store.get("b", lambda: 2)
    assert store.get("a", lambda: -1) == 1  # a used again: b is the oldest
    store.get("c", lambda: 3)
    assert store.get("a", lambda: -1) == 1
    assert store.get("b", lambda: -2) == -2  # b left, worked out again
