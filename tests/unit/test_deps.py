"""The in-memory dependency decision of one run (no database)."""

from __future__ import annotations

import datetime as dt
import json

from sluice.scheduler.core.states import TI
from sluice.scheduler.decide.deps import TiView, run_outcome
from sluice.scheduler.scheduling.run_decision import decide_run

NOW = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)


def spec(
    edges: dict[str, list[str]],
    rules: dict[str, str] | None = None,
    branches: frozenset[str] | set[str] = frozenset(),
) -> dict:
    downstream: dict[str, list[str]] = {t: [] for t in edges}
    for task, ups in edges.items():
        for up in ups:
            downstream[up].append(task)
    return {
        "tasks": {
            t: {
                "task_id": t,
                "upstream": ups,
                "downstream": downstream[t],
                "trigger_rule": (rules or {}).get(t, "all_success"),
                "is_branch": t in branches,
            }
            for t, ups in edges.items()
        }
    }


def views(states: dict[str, TI], results: dict[str, object] | None = None) -> list[TiView]:
    return [
        TiView(
            id=i,
            task_id=t,
            state=s,
            result=json.dumps((results or {})[t]) if t in (results or {}) else None,
        )
        for i, (t, s) in enumerate(states.items())
    ]


def moves_by_task(s: dict, tis: list[TiView]) -> dict[str, TI]:
    ids = {ti.id: ti.task_id for ti in tis}
    decided = decide_run(s, json.dumps(s, sort_keys=True), tis, NOW)
    return {ids[i]: state for state, idss in decided.moves.items() for i in idss}


def test_roots_are_scheduled_and_children_wait() -> None:
    s = spec({"a": [], "b": ["a"]})
    assert moves_by_task(s, views({"a": TI.NONE, "b": TI.NONE})) == {"a": TI.SCHEDULED}


def test_failure_flows_down_in_one_pass() -> None:
    s = spec({"a": [], "b": ["a"], "c": ["b"], "d": ["c"]}, rules={"d": "all_done"})
    got = moves_by_task(s, views({"a": TI.FAILED, "b": TI.NONE, "c": TI.NONE, "d": TI.NONE}))
    assert got == {"b": TI.UPSTREAM_FAILED, "c": TI.UPSTREAM_FAILED, "d": TI.SCHEDULED}


def test_skip_flows_down_and_none_failed_min_one_success_joins() -> None:
    s = spec(
        {"a": [], "b": ["a"], "c": ["a"], "j": ["b", "c"]},
        rules={"j": "none_failed_min_one_success"},
        branches={"a"},
    )
    tis = views({"a": TI.SUCCESS, "b": TI.NONE, "c": TI.NONE, "j": TI.NONE}, {"a": "b"})
    assert moves_by_task(s, tis) == {"b": TI.SCHEDULED, "c": TI.SKIPPED}


def test_early_decision_before_all_upstreams_finish() -> None:
    s = spec({"a": [], "b": [], "c": ["a", "b"]})
    got = moves_by_task(s, views({"a": TI.SKIPPED, "b": TI.RUNNING, "c": TI.NONE}))
    assert got == {"c": TI.SKIPPED}


def test_retry_is_scheduled_only_after_its_delay() -> None:
    s = spec({"a": []})
    later = NOW + dt.timedelta(seconds=30)
    waiting = [TiView(id=1, task_id="a", state=TI.UP_FOR_RETRY, next_retry_at=later)]
    assert decide_run(s, "h", waiting, NOW).moves == {}
    due = [TiView(id=1, task_id="a", state=TI.UP_FOR_RETRY, next_retry_at=NOW)]
    assert decide_run(s, "h", due, NOW).moves == {TI.SCHEDULED: [1]}


def test_run_outcome_comes_from_the_leaves() -> None:
    s = spec({"a": [], "b": ["a"], "c": ["a"]}, rules={"c": "all_done"})
    tis = views({"a": TI.FAILED, "b": TI.UPSTREAM_FAILED, "c": TI.SUCCESS})
    assert run_outcome(s, tis, {}) == TI.FAILED
    tis = views({"a": TI.SUCCESS, "b": TI.SKIPPED, "c": TI.SUCCESS})
    assert run_outcome(s, tis, {}) == TI.SUCCESS
    tis = views({"a": TI.SUCCESS, "b": TI.RUNNING, "c": TI.SUCCESS})
    assert run_outcome(s, tis, {}) is None
