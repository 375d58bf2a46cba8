"""A worker process's copies of large upstream results (`ResultCopies`), and how a read
whose result was left out takes it from them (`fill_upstream`)."""

from __future__ import annotations

import json
from typing import Any

from sluice.broker.worker.upstream_results import ResultCopies, fill_upstream, read_params

BIG = json.dumps([f"item-{i:04d}" for i in range(200)])


def test_copies_keep_large_texts_within_their_bounds_least_recently_used_first() -> None:
    copies = ResultCopies(copies=2, min_bytes=10, max_bytes=100)
    copies.keep("small", "[1]")  # under min_bytes: read again each time
    copies.keep("huge", "x" * 101)  # over max_bytes alone: never kept
    assert copies.snapshot() == {}
    copies.keep("a", "a" * 20)
    copies.keep("b", "b" * 20)
    copies.used("a")  # now b is the least recently used
    copies.keep("c", "c" * 20)
    assert set(copies.snapshot()) == {"a", "c"}
    copies.keep("d", "d" * 70)  # 20 + 70 kept, 90 + 20 would pass max_bytes
    assert set(copies.snapshot()) == {"c", "d"}


def test_a_snapshot_keeps_its_texts_whatever_is_evicted_after() -> None:
    copies = ResultCopies(copies=1, min_bytes=1)
    copies.keep("a", BIG)
    snapshot = copies.snapshot()
    copies.keep("b", BIG)
    assert snapshot == {"a": BIG} and set(copies.snapshot()) == {"b"}


def _fill(rows: list[tuple[Any, ...]], known: dict[str, str], copies: ResultCopies, **kw: Any):
    upstream: dict[str, Any] = {}
    fill_upstream(
        upstream,
        rows,
        mapped=kw.get("mapped", frozenset()),
        per_index=kw.get("per_index"),
        map_index=kw.get("map_index", -1),
        known=known,
        copies=copies,
    )
    return upstream


def test_a_result_left_out_is_taken_from_the_copy_the_read_named() -> None:
    copies = ResultCopies()
    first = _fill([("items", -1, "success", "att-1", BIG)], {}, copies)
    assert first == {"items": json.loads(BIG)}
    known = copies.snapshot()
    assert set(known) == {"att-1"}
    params = read_params(known, ["items"], None, run_pk=7)
    assert params == {
        "run_pk": 7,
        "task_ids": ["items"],
        "per_task": "",
        "known_attempts": ",att-1,",
    }
    assert read_params({}, ["items"], None)["known_attempts"] == ""
    # the next read left the text out: the value comes from the copy, parsed anew
    second = _fill([("items", -1, "success", "att-1", None)], known, copies)
    assert second == first and second["items"] is not first["items"]


def test_a_result_left_out_but_not_named_stays_none() -> None:
    """A success without a result (a None return) is not confused with a copy."""
    copies = ResultCopies()
    assert _fill([("items", -1, "success", "att-2", None)], {"att-1": BIG}, copies) == {
        "items": None
    }


def test_a_mapped_upstream_gives_its_successes_and_a_per_index_upstream_one_value() -> None:
    rows = [
        ("a", 0, "success", "x0", "10"),
        ("a", 1, "failed", "x1", None),
        ("a", 2, "success", "x2", "12"),
    ]
    copies = ResultCopies()
    assert _fill(rows, {}, copies, mapped=frozenset({"a"})) == {"a": [10, 12]}
    one = [("a", 2, "success", "x2", "12")]
    assert _fill(one, {}, copies, mapped=frozenset({"a"}), per_index="a", map_index=2) == {"a": 12}


def test_the_per_index_upstream_is_read_by_its_own_condition() -> None:
    params = read_params({}, ["a", "b"], "a", run_pk=1, map_index=3)
    assert params["task_ids"] == ["b"] and params["per_task"] == "a"
