"""Turning rows into response schemas; the DAG's task order and its cache; the trace id."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from cachetools import LRUCache
from sqlalchemy.orm import Session

from sluice.scheduler.api.config import ApiConfig
from sluice.scheduler.api.schemas import (
    DagSummary,
    NoteOut,
    RunBrief,
    RunOut,
    RunSummary,
    TaskInstanceOut,
    VersionRefOut,
)
from sluice.scheduler.core.models import AuditEvent, Dag, DagRun, TaskInstance
from sluice.scheduler.core.queries import audit
from sluice.scheduler.core.queries.version_reads import VersionRef
from sluice.scheduler.scheduling.shapes import task_order, task_specs_json

_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}$")


def trace_id_of(carrier: dict[str, Any] | None) -> str | None:
    """The trace id of a W3C `traceparent` in `carrier` (`00-<trace>-<span>-01`), if valid."""
    parent = (carrier or {}).get("traceparent")
    if not isinstance(parent, str):
        return None
    match = _TRACEPARENT.match(parent.strip().lower())
    return match.group(1) if match else None


ID_BYTES = 64
"""About what one cached task id costs (the str and its slot in the order)."""


NO_PARAMS: dict[str, Any] = {"type": "object", "properties": {}, "required": []}
"""The params of a DAG without any: the schema every conf fits."""


def _definition_json(spec: dict[str, Any]) -> bytes:
    """The DAG detail's `params` and `groups` fields of a definition, as JSON (the
    fields alone, without braces): its params (`tasks.params.params_schema`; `NO_PARAMS`
    for a DAG without params) and its task groups (`groups_out`)."""
    params = spec.get("params")
    fields = {
        "params": params if isinstance(params, dict) else NO_PARAMS,
        "groups": groups_out(spec.get("groups")),
    }
    return json.dumps(fields, separators=(",", ":")).encode("utf-8")[1:-1]


def groups_out(groups: Any) -> list[dict[str, Any]]:
    """A definition's task groups (`tasks.task_group.groups_json`) as the DAG detail
    lists them, in definition order: each group's id, its parent group (None at the
    top), whether it is mapped, and its task ids, its nested groups' included."""
    if not isinstance(groups, dict):
        return []
    own = {
        group_id: [str(t) for t in (spec.get("tasks") or [])]
        for group_id, spec in groups.items()
        if isinstance(spec, dict)
    }
    parents = {group_id: groups[group_id].get("parent") for group_id in own}

    def members(group_id: str) -> list[str]:
        found = list(own[group_id])
        for child, parent in parents.items():
            if parent == group_id:
                found += members(child)
        return found

    return [
        {
            "group_id": group_id,
            "parent": parents[group_id],
            "mapped": bool(groups[group_id].get("map")),
            "tasks": members(group_id),
        }
        for group_id in own
    ]


NO_DEFINITION_JSON = _definition_json({})


@dataclass
class DagShape:
    """What the DAG pages need of one DAG version that does not change with its runs."""

    order: tuple[str, ...]
    """The task ids, `task_order`."""
    task_count: int
    tasks_json: bytes | None = None
    """The DAG detail's `tasks` (a `TaskSpecOut` per task, in `order`) as JSON, built on
    first use."""
    definition_json: bytes | None = None
    """The DAG detail's `params` (its params' JSON Schema, `NO_PARAMS` for none) and
    `groups` fields as JSON (`_definition_json`), read on first use."""

    @property
    def size(self) -> int:
        return (
            ID_BYTES * len(self.order)
            + len(self.tasks_json or b"")
            + len(self.definition_json or b"")
        )


class ShapeCache:
    """The `DagShape` of each DAG version, by `(dag_id, version_hash)`: a new version of
    a DAG has a new hash, so its shape is computed again and the old one ages out. The
    least recently used shapes are dropped once the cache holds over `max_bytes` (about;
    the newest one is always kept: a shape counts at most `max_bytes`). A cachetools
    `LRUCache` sized by `DagShape.size`, behind a lock: routes run in a thread pool."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._shapes: LRUCache[tuple[str, str], DagShape] = LRUCache(
            maxsize=max_bytes, getsizeof=lambda shape: min(shape.size, max_bytes)
        )
        self._lock = threading.Lock()

    def cached(self, dag: Dag) -> DagShape | None:
        with self._lock:
            return self._shapes.get((dag.dag_id, dag.version_hash))

    def add(self, dag_id: str, version_hash: str, spec: dict[str, Any]) -> DagShape:
        """The shape of `spec`, the definition of that DAG version, computed and kept."""
        order = tuple(task_order(spec))
        shape = DagShape(order, len(spec.get("tasks", {})), definition_json=_definition_json(spec))
        return self._keep((dag_id, version_hash), shape)

    def shape(self, dag: Dag) -> DagShape:
        """The DAG's shape; on a miss it reads the order the sync stored with the DAG
        (`dag.task_order`, a deferred column: loaded then, and only then), or, for a row
        recorded without it, orders `dag.serialized` (deferred too)."""
        found = self.cached(dag)
        if found is not None:
            return found
        stored = dag.task_order
        if stored is None:
            return self.add(dag.dag_id, dag.version_hash, dag.serialized)
        return self.add_stored(dag.dag_id, dag.version_hash, stored)

    def add_stored(self, dag_id: str, version_hash: str, task_order: str) -> DagShape:
        """The shape of a DAG version from the order the sync stored (`dag.task_order`)."""
        order = tuple(json.loads(task_order))
        return self._keep((dag_id, version_hash), DagShape(order, len(order)))

    def tasks_json(self, dag: Dag) -> bytes:
        """The DAG detail's `tasks` as JSON: the first time, what the sync stored with the
        DAG (`dag.tasks_detail`), or built from `dag.serialized` for a row without it."""
        shape = self.shape(dag)
        if shape.tasks_json is None:
            stored = dag.tasks_detail
            built = (
                stored.encode("utf-8")
                if stored is not None
                else task_specs_json(dag.serialized, shape.order)
            )
            self._fill(dag, shape, "tasks_json", built)
            return built
        return shape.tasks_json

    def definition_json(self, dag: Dag, read: Callable[[], tuple[Any, Any]]) -> bytes:
        """The DAG detail's `params` and `groups` as JSON: the first time, `read()` (the
        params and the groups alone, read from the definition by their paths:
        `routes_dags.params_and_groups_of`), unless the shape was made from the whole definition,
        which gave them."""
        shape = self.shape(dag)
        if shape.definition_json is None:
            params, groups = read()
            built = _definition_json({"params": params, "groups": groups})
            self._fill(dag, shape, "definition_json", built)
            return built
        return shape.definition_json

    def _fill(self, dag: Dag, shape: DagShape, field: str, built: bytes) -> None:
        """Set `shape`'s `field` to `built` unless another request did, and size the
        shape again: older shapes may go."""
        key = (dag.dag_id, dag.version_hash)
        with self._lock:
            if getattr(shape, field) is None:
                setattr(shape, field, built)
                if self._shapes.get(key) is shape:
                    self._shapes[key] = shape

    def _keep(self, key: tuple[str, str], shape: DagShape) -> DagShape:
        with self._lock:
            return self._shapes.setdefault(key, shape)

    def __len__(self) -> int:
        return len(self._shapes)

    @property
    def bytes(self) -> int:
        return int(self._shapes.currsize)


def dag_detail_json(
    summary: DagSummary,
    tasks_json: bytes,
    assets: dict[str, list[str]] | None = None,
    definition_json: bytes = NO_DEFINITION_JSON,
) -> bytes:
    """The `DagDetail` of `summary` with its assets, params, groups and these tasks, as
    JSON: the summary's own JSON with `consumes`, `produces`, `params`, `groups` and
    `tasks` appended (the
    last fields of `DagDetail`), so a big DAG's task list is not rebuilt, validated and
    encoded again at every request."""
    head = summary.model_dump_json().encode("utf-8")
    assets = assets or {}
    used = {"consumes": assets.get("consumes", []), "produces": assets.get("produces", [])}
    middle = json.dumps(used, separators=(",", ":")).encode("utf-8")[1:-1]
    return head[:-1] + b"," + middle + b"," + definition_json + b',"tasks":' + tasks_json + b"}"


def dag_summary(
    dag: Dag, recent: Sequence[RunBrief], task_count: int, watch_error: str | None = None
) -> DagSummary:
    return DagSummary(
        dag_id=dag.dag_id,
        fileloc=dag.fileloc,
        schedule=dag.schedule,
        is_paused=dag.is_paused,
        next_dagrun=dag.next_dagrun,
        next_dagrun_create_after=dag.next_dagrun_create_after,
        task_count=task_count,
        import_error=dag.import_error,
        watch_error=watch_error,
        recent_runs=list(recent),
    )


def version_ref_out(ref: VersionRef | None) -> VersionRefOut | None:
    """What a run shows of its version (`version_reads.version_refs`), if it has one."""
    return None if ref is None else VersionRefOut(sha=ref.sha, short=ref.short, subject=ref.subject)


def _run_fields(run: DagRun, config: ApiConfig, version: VersionRef | None) -> dict[str, Any]:
    trace_id = trace_id_of(run.context_carrier)
    return {
        "dag_id": run.dag_id,
        "run_id": run.run_id,
        "logical_date": run.logical_date,
        "run_type": run.run_type,
        "state": run.state,
        "queued_at": run.queued_at,
        "start_date": run.start_date,
        "end_date": run.end_date,
        "trace_id": trace_id,
        "trace_url": config.trace_link(trace_id),
        "bundle_version": run.bundle_version,
        "version": version_ref_out(version),
    }


def run_summary(run: DagRun, config: ApiConfig, version: VersionRef | None = None) -> RunSummary:
    """A run in a list: everything but its conf (which the list never reads); `version`
    is the run's `dag_version` (`version_reads.version_refs`), if it has one."""
    return RunSummary(**_run_fields(run, config, version))


def run_out(
    run: DagRun,
    config: ApiConfig,
    note: NoteOut | None = None,
    version: VersionRef | None = None,
) -> RunOut:
    return RunOut(**_run_fields(run, config, version), conf=dict(run.conf or {}), note=note)


def note_out(session: Session, dag_id: str, run_id: str, task_id: str | None) -> NoteOut | None:
    """The note of the run (`task_id` None) or of its task instance, if any."""
    event = audit.latest_note(session, dag_id, run_id, task_id)
    return None if event is None else note_from(event)


def note_from(event: AuditEvent) -> NoteOut:
    """A note's event (`audit.NOTE`, its text the detail) as the API answers it."""
    return NoteOut(note=event.detail or "", who=event.who, at=event.at)


def ti_fields(ti: TaskInstance) -> dict[str, Any]:
    fields = {name: getattr(ti, name) for name in TaskInstanceOut.model_fields}
    fields["map_index"] = None if ti.map_index < 0 else ti.map_index
    return fields


def ti_out(ti: TaskInstance) -> TaskInstanceOut:
    return TaskInstanceOut(**ti_fields(ti))
