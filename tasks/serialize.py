"""The JSON form of a DAG (what the scheduler stores and works from) and retry delays.

``serialize_dag`` is JSON-safe and deterministic: task dependency lists are sorted and task
order is definition order. ``version_hash`` depends on everything but ``fileloc``, so moving
a file does not count as a change while any task option change does.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timedelta
from typing import Any

from sluice.tasks.callbacks import kinds_set
from sluice.tasks.celery_task import CeleryTask, to_json
from sluice.tasks.dag import DAG
from sluice.tasks.mapping import DEFAULT_MAX_MAP_LENGTH, KWARGS, map_json, reference_of
from sluice.tasks.task import Task
from sluice.tasks.task_group import groups_json

#: Cap on an exponential-backoff retry delay when the task sets no ``max_retry_delay``.
MAX_BACKOFF_DELAY = timedelta(hours=24)


def _seconds(value: timedelta | None) -> float | None:
    return None if value is None else value.total_seconds()


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def serialize_task(task: Task) -> dict[str, Any]:
    """The JSON form of one task (see ``serialize_dag``).

    A CeleryTask (kind "celery") adds ``celery``: its ``name``, ``args``, ``kwargs`` (upstream
    markers as ``{"$upstream": task_id}``), ``timeout`` (seconds or null) and ``queue``.
    """
    spec = {
        "task_id": task.task_id,
        "kind": task.kind,
        "upstream": sorted(task.upstream_task_ids),
        "downstream": sorted(task.downstream_task_ids),
        "trigger_rule": str(task.trigger_rule),
        "retries": task.retries,
        "retry_delay": task.retry_delay.total_seconds(),
        "retry_exponential_backoff": task.retry_exponential_backoff,
        "max_retry_delay": _seconds(task.max_retry_delay),
        "execution_timeout": _seconds(task.execution_timeout),
        "queue": task.queue,
        "pool": task.pool,
        "pool_slots": task.pool_slots,
        "priority_weight": task.priority_weight,
        "is_branch": task.is_branch,
    }
    if task.bound_call is not None:  # only when called: other DAGs keep their version hash
        args, kwargs = task.bound_call
        spec["call"] = {
            "args": to_json(list(args), strict=False),
            "kwargs": to_json(kwargs, strict=False),
        }
    if task.map is not None:
        spec["map"] = _map_spec(task)
    for name in ("max_map_length", "max_active_tis_per_dagrun"):
        if getattr(task, name) is not None:  # only when set: other DAGs keep their hash
            spec[name] = getattr(task, name)
    output = _map_output(task)
    if output is not None:
        spec["map_output"] = output
    if task.queued_timeout is not None:  # only when set: other DAGs keep their version hash
        spec["queued_timeout"] = _seconds(task.queued_timeout)
    if any(task.callbacks.values()):
        spec["callbacks"] = kinds_set(task.callbacks)
    if task.outlets:  # only when set: other DAGs keep their version hash
        spec["outlets"] = [asset.uri for asset in task.outlets]
    if task.concurrency is not None:  # only when set: other DAGs keep their version hash
        spec["concurrency"] = task.concurrency.serialized()
    if task.rate_limit is not None:
        spec["rate_limit"] = task.rate_limit.serialized()
    if task.sensor is not None:  # only for a sensor: other DAGs keep their version hash
        spec["sensor"] = task.sensor.serialized()
    if isinstance(task, CeleryTask):
        spec["celery"] = {
            "name": task.name,
            "args": to_json(task.args),
            "kwargs": to_json(task.kwargs),
            "timeout": _seconds(task.timeout),
            "queue": task.celery_queue,
        }
    return spec


def _map_spec(task: Task) -> dict[str, Any]:
    """A mapped task's ``map``: its mode and sources (``mapping.map_json``) and
    ``per_index``, the mapped upstream it maps one to one (it is expanded over that
    task's output alone), else null."""
    assert task.map is not None
    spec = map_json(task.map, lambda source: to_json(source, strict=False))
    spec["per_index"] = task.per_index
    return spec


def _map_output(task: Task) -> dict[str, Any] | None:
    """For a task (not itself mapped) whose output a mapped task expands over: what its
    worker checks of its return value before it writes its success (a list or a dict;
    with ``kwargs``, dicts of arguments; at most ``limit`` items, ``consumer``'s
    max_map_length, the smallest). None for other tasks."""
    if task.map is not None:
        return None
    consumers = [
        t
        for t in task.dag.tasks.values()
        if t.map is not None and any(reference_of(src) == task.task_id for _, src in t.map.args)
    ]
    if not consumers:
        return None
    first = min(consumers, key=lambda t: (t.max_map_length or DEFAULT_MAX_MAP_LENGTH, t.task_id))
    return {
        "limit": first.max_map_length or DEFAULT_MAX_MAP_LENGTH,
        "consumer": first.task_id,
        "kwargs": any(t.map is not None and t.map.mode == KWARGS for t in consumers),
    }


def serialize_dag(dag: DAG) -> dict[str, Any]:
    """The JSON form of ``dag``: schedule is null, a cron/preset string, {"seconds": s},
    {"assets": condition} (``assets.condition_json``) or {"watch": {...}} (``Watch.json``);
    ``params``, when it has any, their JSON Schema object (``params.params_schema``)."""
    schedule: Any = dag.schedule
    if isinstance(schedule, timedelta):
        schedule = {"seconds": schedule.total_seconds()}
    elif dag.asset_condition is not None:
        schedule = {"assets": dag.asset_condition}
    elif dag.watch is not None:
        schedule = {"watch": dag.watch.json()}
    spec: dict[str, Any] = {
        "dag_id": dag.dag_id,
        "fileloc": dag.fileloc,
        "description": dag.description,
        "schedule": schedule,
        "start_date": _iso(dag.start_date),
        "end_date": _iso(dag.end_date),
        "catchup": dag.catchup,
        "max_active_runs": dag.max_active_runs,
        "max_active_tasks": dag.max_active_tasks,
        "tasks": {task_id: serialize_task(t) for task_id, t in dag.tasks.items()},
    }
    if dag.dagrun_timeout is not None:  # only when set: other DAGs keep their version hash
        spec["dagrun_timeout"] = _seconds(dag.dagrun_timeout)
    if dag.deadline is not None:
        spec["deadline"] = _seconds(dag.deadline)
    if any(dag.callbacks.values()):
        spec["callbacks"] = kinds_set(dag.callbacks)
    if dag.params_schema is not None:  # only when set: other DAGs keep their version hash
        spec["params"] = dag.params_schema
    groups = groups_json(dag, lambda source: to_json(source, strict=False))
    if groups is not None:  # only with groups: other DAGs keep their version hash
        spec["groups"] = groups
    return spec


def version_hash(serialized: dict[str, Any]) -> str:
    """sha256 hex of the canonical JSON (``sort_keys``) of ``serialized`` without fileloc."""
    body = {k: v for k, v in serialized.items() if k != "fileloc"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def retry_delay_for(task_spec: dict[str, Any], try_number: int) -> timedelta:
    """The wait before the next try, after try ``try_number`` (1-based) failed.

    ``retry_delay``; with exponential backoff ``retry_delay * 2**(try_number-1)`` capped by
    ``max_retry_delay``, or by 24 h if that is not set. Without backoff ``max_retry_delay``
    still caps ``retry_delay`` (as in Airflow). No jitter: same inputs, same delay.
    """
    if try_number < 1:
        raise ValueError(f"try_number starts at 1, got {try_number}")
    seconds = float(task_spec["retry_delay"])
    cap = task_spec.get("max_retry_delay")
    if task_spec.get("retry_exponential_backoff"):
        seconds *= 2.0 ** min(try_number - 1, 64)
        if cap is None:
            cap = MAX_BACKOFF_DELAY.total_seconds()
    if cap is not None:
        seconds = min(seconds, float(cap))
    return timedelta(seconds=seconds)
