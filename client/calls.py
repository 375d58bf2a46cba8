"""Each method of the clients as one `Call`: the request it makes and how its answer is
read. `Client` and `AsyncClient` send the same calls, one with httpx's sync client and
one with its async client, so the two cannot drift apart.

Paths are the routes of `/api/v1` (`scheduler/api/routes_*.py`); each id in a path is
percent-encoded (a run id such as `manual__2026-01-01T00:00:00+00:00` keeps its `+`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from urllib.parse import quote

from sluice.client.models import (
    ClearResult,
    EventResult,
    MarkResult,
    Run,
    TaskInstance,
    TaskLog,
)

T = TypeVar("T")
Item = TypeVar("Item")

V1 = "/api/v1"

PAGE_MAX = 500
"""Most items the API gives on one page of a list (`scheduler/api/paging.py`)."""


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request (`method`, `path`, query `params`, JSON `body`) and `decode`, which
    makes the method's result of the answer's JSON object."""

    method: str
    path: str
    decode: Callable[[Mapping[str, Any]], T]
    params: dict[str, str | int] = field(default_factory=dict)
    body: dict[str, Any] | None = None


@dataclass(frozen=True)
class Page(Generic[Item]):
    """One page of a long list, and how many items the whole list has."""

    items: list[Item]
    total: int


def _ids(*parts: str) -> str:
    return "/".join(quote(part, safe="") for part in parts)


def _runs_path(dag_id: str) -> str:
    return f"{V1}/dags/{_ids(dag_id)}/runs"


def _run_path(dag_id: str, run_id: str) -> str:
    return f"{_runs_path(dag_id)}/{_ids(run_id)}"


def _task_path(dag_id: str, run_id: str, task_id: str) -> str:
    return f"{_run_path(dag_id, run_id)}/tasks/{_ids(task_id)}"


def _items(data: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    items = data[key]
    if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
        raise TypeError(f"{key} is not a list of objects")
    return items


def _total(data: Mapping[str, Any]) -> int:
    total = data["total"]
    if not isinstance(total, int) or isinstance(total, bool):
        raise TypeError("total is not an integer")
    return total


def _set(target: dict[str, Any], **values: Any) -> dict[str, Any]:
    """`target` with the values that are not None."""
    target.update({key: value for key, value in values.items() if value is not None})
    return target


# -- runs ----------------------------------------------------------------------------------


def trigger(
    dag_id: str,
    conf: Mapping[str, Any] | None,
    run_id: str | None,
    logical_date: dt.datetime | str | None,
    version: str | None,
) -> Call[Run]:
    if isinstance(logical_date, dt.datetime):
        logical_date = logical_date.isoformat()
    body = _set(
        {},
        conf=dict(conf) if conf is not None else None,
        run_id=run_id,
        logical_date=logical_date,
        version=version,
    )
    return Call("POST", _runs_path(dag_id), Run.from_json, body=body)


def get_run(dag_id: str, run_id: str) -> Call[Run]:
    return Call("GET", _run_path(dag_id, run_id), Run.from_json)


def list_runs(dag_id: str, state: str | None, limit: int, offset: int) -> Call[list[Run]]:
    params = _set({"limit": limit, "offset": offset}, state=state)
    return Call(
        "GET",
        _runs_path(dag_id),
        lambda data: [Run.from_json(item) for item in _items(data, "runs")],
        params=params,
    )


def cancel(dag_id: str, run_id: str) -> Call[Run]:
    return Call("POST", f"{_run_path(dag_id, run_id)}/cancel", Run.from_json)


def mark(
    dag_id: str,
    run_id: str,
    state: str,
    task_id: str | None,
    upstream: bool,
    downstream: bool,
) -> Call[MarkResult]:
    """The run's mark (`task_id` None), or the task instance's (with its `upstream` and
    `downstream`, which a run's mark does not take)."""
    if task_id is None:
        if upstream or downstream:
            raise ValueError("upstream and downstream mark a task's neighbours: give a task_id")
        path = f"{_run_path(dag_id, run_id)}/mark"
        return Call("POST", path, MarkResult.from_json, body={"state": state})
    body = {"state": state, "upstream": upstream, "downstream": downstream}
    path = f"{_task_path(dag_id, run_id, task_id)}/mark"
    return Call("POST", path, MarkResult.from_json, body=body)


# -- task instances ------------------------------------------------------------------------


def list_task_instances(
    dag_id: str,
    run_id: str,
    task_id: str | None,
    state: str | None,
    map_index: int | None,
    offset: int,
) -> Call[Page[TaskInstance]]:
    params = _set(
        {"limit": PAGE_MAX, "offset": offset}, task_id=task_id, state=state, map_index=map_index
    )
    return Call(
        "GET",
        f"{_run_path(dag_id, run_id)}/tasks",
        lambda data: Page(
            [TaskInstance.from_json(item) for item in _items(data, "task_instances")],
            _total(data),
        ),
        params=params,
    )


def task_log(
    dag_id: str, run_id: str, task_id: str, try_number: int | None, map_index: int | None
) -> Call[TaskLog]:
    params = _set({}, try_number=try_number, map_index=map_index)
    path = f"{_task_path(dag_id, run_id, task_id)}/logs"
    return Call("GET", path, TaskLog.from_json, params=params)


def clear(
    dag_id: str, run_id: str, task_id: str, downstream: bool, map_index: int | None
) -> Call[ClearResult]:
    body = _set({"downstream": downstream}, map_index=map_index)
    path = f"{_task_path(dag_id, run_id, task_id)}/clear"
    return Call("POST", path, ClearResult.from_json, body=body)


# -- events --------------------------------------------------------------------------------


def send_event(key: str, payload: Mapping[str, Any] | None) -> Call[EventResult]:
    body = _set({"key": key}, payload=dict(payload) if payload is not None else None)
    return Call("POST", f"{V1}/events", EventResult.from_json, body=body)
