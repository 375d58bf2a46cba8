"""Turning rows into response schemas; the DAG's task order; the run's trace id."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from sluice.scheduler.api.config import ApiConfig
from sluice.scheduler.api.schemas import (
    DagSummary,
    RunBrief,
    RunOut,
    TaskInstanceOut,
    TaskSpecOut,
)
from sluice.scheduler.core.models import Dag, DagRun, TaskInstance

_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}$")


def trace_id_of(carrier: dict[str, Any] | None) -> str | None:
    """The trace id of a W3C `traceparent` in `carrier` (`00-<trace>-<span>-01`), if valid."""
    parent = (carrier or {}).get("traceparent")
    if not isinstance(parent, str):
        return None
    match = _TRACEPARENT.match(parent.strip().lower())
    return match.group(1) if match else None


def task_order(spec: dict[str, Any]) -> list[str]:
    """Task ids upstream first (Kahn's algorithm, ties by id); any leftover ids last."""
    tasks: dict[str, Any] = spec.get("tasks", {})
    pending = {t: {u for u in tasks[t].get("upstream", []) if u in tasks} for t in tasks}
    order: list[str] = []
    ready = sorted(t for t, ups in pending.items() if not ups)
    while ready:
        task_id = ready.pop(0)
        order.append(task_id)
        del pending[task_id]
        freed = [t for t, ups in pending.items() if task_id in ups]
        for t in freed:
            pending[t].discard(task_id)
        ready = sorted({*ready, *(t for t in freed if not pending[t])})
    return order + sorted(pending)


def task_specs(spec: dict[str, Any]) -> list[TaskSpecOut]:
    tasks = spec.get("tasks", {})
    return [
        TaskSpecOut(
            task_id=task_id,
            kind=tasks[task_id].get("kind"),
            upstream=sorted(tasks[task_id].get("upstream", [])),
            downstream=sorted(tasks[task_id].get("downstream", [])),
            trigger_rule=tasks[task_id].get("trigger_rule"),
            retries=int(tasks[task_id].get("retries") or 0),
            queue=tasks[task_id].get("queue") or "default",
        )
        for task_id in task_order(spec)
    ]


def dag_summary(dag: Dag, recent: Sequence[DagRun]) -> DagSummary:
    return DagSummary(
        dag_id=dag.dag_id,
        fileloc=dag.fileloc,
        schedule=dag.schedule,
        is_paused=dag.is_paused,
        next_dagrun=dag.next_dagrun,
        task_count=len(dag.serialized.get("tasks", {})),
        import_error=dag.import_error,
        recent_runs=[
            RunBrief(run_id=r.run_id, state=r.state, logical_date=r.logical_date) for r in recent
        ],
    )


def run_out(run: DagRun, config: ApiConfig) -> RunOut:
    trace_id = trace_id_of(run.context_carrier)
    return RunOut(
        dag_id=run.dag_id,
        run_id=run.run_id,
        logical_date=run.logical_date,
        run_type=run.run_type,
        state=run.state,
        conf=dict(run.conf or {}),
        queued_at=run.queued_at,
        start_date=run.start_date,
        end_date=run.end_date,
        trace_id=trace_id,
        trace_url=config.trace_link(trace_id),
    )


def ti_fields(ti: TaskInstance) -> dict[str, Any]:
    return {name: getattr(ti, name) for name in TaskInstanceOut.model_fields}


def ti_out(ti: TaskInstance) -> TaskInstanceOut:
    return TaskInstanceOut(**ti_fields(ti))
