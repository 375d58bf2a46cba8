"""A DAG version's shape as the API's pages show it: its tasks in topological order and
the DAG detail's task list as JSON.

Both follow from the DAG's definition alone, so the DAGs folder's sync computes them when
it records a DAG (`dagbag`; `dag.task_order`, `dag.tasks_detail`) and a new API process
reads them instead of parsing a big definition (3.7 MB for 10,000 tasks) and ordering it
on its first request. The API computes them itself for a row recorded without them.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Sequence
from typing import Any


def task_order(spec: dict[str, Any]) -> list[str]:
    """Task ids upstream first (Kahn's algorithm, ties by id); any leftover ids last.

    O(V + E log V): a heap of the ready ids, so the smallest ready id always comes next,
    as it did with a sorted list; the ids left in a cycle follow, sorted.
    """
    tasks: dict[str, Any] = spec.get("tasks", {})
    waiting: dict[str, int] = {}
    downstream: dict[str, list[str]] = {t: [] for t in tasks}
    for task_id, task in tasks.items():
        ups = {u for u in task.get("upstream", []) if u in tasks}
        waiting[task_id] = len(ups)
        for up in ups:
            downstream[up].append(task_id)
    ready = [t for t, n in waiting.items() if n == 0]
    heapq.heapify(ready)
    order: list[str] = []
    while ready:
        task_id = heapq.heappop(ready)
        order.append(task_id)
        del waiting[task_id]
        for down in downstream[task_id]:
            waiting[down] -= 1
            if waiting[down] == 0:
                heapq.heappush(ready, down)
    return order + sorted(waiting)


def task_specs(spec: dict[str, Any], order: Sequence[str]) -> list[dict[str, Any]]:
    """The `TaskSpecOut` of each task in `order`, as plain dicts (a big DAG's list is built
    without a model per task; `tests/api/test_dag_shapes.py` holds them to the schema)."""
    tasks = spec.get("tasks", {})
    out = []
    for task_id in order:
        task = tasks[task_id]
        kind, rule = task.get("kind"), task.get("trigger_rule")
        out.append(
            {
                "task_id": str(task_id),
                "kind": None if kind is None else str(kind),
                "upstream": sorted(map(str, task.get("upstream", []))),
                "downstream": sorted(map(str, task.get("downstream", []))),
                "trigger_rule": None if rule is None else str(rule),
                "retries": int(task.get("retries") or 0),
                "queue": str(task.get("queue") or "default"),
            }
        )
    return out


def task_specs_json(spec: dict[str, Any], order: Sequence[str]) -> bytes:
    specs = task_specs(spec, order)
    return json.dumps(specs, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def shape_columns(spec: dict[str, Any]) -> dict[str, str]:
    """The `dag` columns of a definition's shape: `task_order` (a JSON array of the task
    ids in `task_order`) and `tasks_detail` (`task_specs_json` in that order)."""
    order = task_order(spec)
    return {
        "task_order": json.dumps(order, ensure_ascii=False, separators=(",", ":")),
        "tasks_detail": task_specs_json(spec, order).decode("utf-8"),
    }
