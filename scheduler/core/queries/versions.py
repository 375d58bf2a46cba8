"""Reads of a git bundle's DAG versions: for the CLI and the API, and the task specs the
schedulers' sweeps fail tries by (no locks)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import func, select, tuple_
from sqlalchemy.orm import Session

from sluice.scheduler.core.models import Dag, DagRun, DagVersion, TaskInstance


def dag_versions(session: Session, dag_id: str, limit: int = 500) -> list[dict[str, Any]]:
    """The versions of `dag_id`, newest commit first: sha, date, author, subject and the
    number of runs created with each (one grouped count)."""
    runs = {
        version: count
        for version, count in session.execute(
            select(DagRun.dag_version_id, func.count())
            .where(DagRun.dag_id == dag_id, DagRun.dag_version_id.is_not(None))
            .group_by(DagRun.dag_version_id)
        )
    }
    rows = session.scalars(
        select(DagVersion)
        .where(DagVersion.dag_id == dag_id)
        .order_by(DagVersion.committed_at.desc(), DagVersion.id.desc())
        .limit(limit)
    ).all()
    return [
        {
            "id": v.id,
            "commit_sha": v.commit_sha,
            "bundle": v.bundle,
            "committed_at": v.committed_at,
            "author": v.author,
            "subject": v.subject,
            "fileloc": v.fileloc,
            "tasks": list(v.serialized.get("tasks", {})),
            "runs": int(runs.get(v.id, 0)),
        }
        for v in rows
    ]


def task_specs_of(
    session: Session, tis: Sequence[TaskInstance]
) -> dict[int, dict[str, Any] | None]:
    """Each TI's task as its run's DAG version defines it (retries, delays, callbacks):
    the DAG's stored definition, or, for a run of a git bundle's DAG that follows another
    version, that version's (`dag_version`); None for a task neither has. Three reads at
    most, whatever the number of TIs."""
    if not tis:
        return {}
    stored: dict[str, tuple[str, dict[str, Any]]] = {
        dag_id: (version, spec or {})
        for dag_id, version, spec in session.execute(
            select(Dag.dag_id, Dag.version_hash, Dag.serialized).where(
                Dag.dag_id.in_({t.dag_id for t in tis})
            )
        )
    }
    follows = {
        run_pk: version
        for run_pk, version in session.execute(
            select(DagRun.id, DagRun.dag_hash).where(DagRun.id.in_({t.dag_run_id for t in tis}))
        )
    }
    other = {
        (t.dag_id, follows[t.dag_run_id])
        for t in tis
        if t.dag_run_id in follows
        and t.dag_id in stored
        and stored[t.dag_id][0] != follows[t.dag_run_id]
    }
    versions: dict[tuple[str, str], dict[str, Any]] = {}
    if other:
        for dag_id, version, spec in session.execute(
            select(DagVersion.dag_id, DagVersion.version_hash, DagVersion.serialized).where(
                tuple_(DagVersion.dag_id, DagVersion.version_hash).in_(sorted(other))
            )
        ):
            versions[(dag_id, version)] = spec
    found: dict[int, dict[str, Any] | None] = {}
    for ti in tis:
        version, latest = stored.get(ti.dag_id, ("", {}))
        spec = versions.get((ti.dag_id, follows.get(ti.dag_run_id) or version), latest)
        found[ti.id] = spec.get("tasks", {}).get(ti.task_id)
    return found
