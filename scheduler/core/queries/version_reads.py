"""Reads of a git bundle's DAG versions for the API and the web UI: what a run shows of
the version it follows, one version named by its commit, the version before it, and the
tasks two versions differ by. No locks; nothing here writes.

A run's commit (`dag_run.bundle_version`) may be a later commit than its version's
(`dag_version.commit_sha`): a commit that changes neither the DAG's definition nor its
file records no version, and its runs follow the version before it, whose file is the
same bytes.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, or_, select
from sqlalchemy.orm import Session, defer

from sluice.scheduler.core.models import DagVersion

SHORT_SHA = 12
"""The characters of a commit's short form, as `sluice dags versions` prints it."""


@dataclass(frozen=True)
class VersionRef:
    """What a run shows of its version: the version's commit and subject."""

    sha: str
    subject: str

    @property
    def short(self) -> str:
        return self.sha[:SHORT_SHA]


def version_refs(session: Session, ids: Collection[int]) -> dict[int, VersionRef]:
    """The commit and subject of each `dag_version` of `ids`, by id (one query, without
    the versions' definitions); ids that name no row are left out."""
    if not ids:
        return {}
    rows = session.execute(
        select(DagVersion.id, DagVersion.commit_sha, DagVersion.subject).where(
            DagVersion.id.in_(sorted(set(ids)))
        )
    ).all()
    return {int(row.id): VersionRef(row.commit_sha, row.subject) for row in rows}


def version_at(
    session: Session, dag_id: str, sha: str, *, definition: bool = True
) -> DagVersion | None:
    """The version of `dag_id` recorded at commit `sha` (a full sha, or a prefix of one),
    or None when no version or more than one has it; its `serialized` is read with the row
    only with `definition`."""
    options = () if definition else (defer(DagVersion.serialized, raiseload=True),)
    found = session.scalars(
        select(DagVersion)
        .options(*options)
        .where(DagVersion.dag_id == dag_id, DagVersion.commit_sha.startswith(sha, autoescape=True))
        .order_by(DagVersion.id)
        .limit(2)
    ).all()
    return found[0] if len(found) == 1 else None


def version_before(session: Session, version: DagVersion) -> DagVersion | None:
    """The version of the same DAG just older than `version`, in the order of
    `queries.versions.dag_versions` (commit date, then id); None for its first."""
    return session.scalars(
        select(DagVersion)
        .where(
            DagVersion.dag_id == version.dag_id,
            or_(
                DagVersion.committed_at < version.committed_at,
                and_(
                    DagVersion.committed_at == version.committed_at,
                    DagVersion.id < version.id,
                ),
            ),
        )
        .order_by(DagVersion.committed_at.desc(), DagVersion.id.desc())
        .limit(1)
    ).first()


def task_ids(spec: dict[str, Any]) -> list[str]:
    """The task ids of a DAG's definition (`serialized["tasks"]`, by task id)."""
    tasks = spec.get("tasks")
    return list(tasks) if isinstance(tasks, dict) else []


def task_changes(old: dict[str, Any] | None, new: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(added, removed): the task ids of `new` that `old` lacks and the task ids of `old`
    that `new` lacks, each sorted; with no `old`, every task of `new` is added."""
    before = set(task_ids(old)) if old is not None else set()
    after = set(task_ids(new))
    return sorted(after - before), sorted(before - after)
