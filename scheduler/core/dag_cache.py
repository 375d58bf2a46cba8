"""Serialized DAGs cached by version hash, so a loop does not re-read them unchanged.

A big DAG's serialized form is megabytes of JSON: the cache asks the database
only for `(dag_id, version_hash)` and fetches a DAG's row again only when its
hash changed. Cached rows are detached copies: read them, never write them.

A run of a git bundle's DAG follows the version it was created with, which may not be
the DAG's current one: `get` of another version than the stored row's answers a
transient `Dag` built from that version's `dag_version` row (`as_version`), kept in an
LRU of `VERSIONS_KEPT` (a version's definition never changes). A folder bundle's DAG has
no versions: `get` answers its stored row, as before.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from cachetools import LRUCache
from sqlalchemy import select
from sqlalchemy.orm import Session

from sluice.scheduler.core.models import Dag, DagRun, DagVersion

VERSIONS_KEPT = 64


def as_version(latest: Dag | None, version: DagVersion, bundle_version: str | None = None) -> Dag:
    """A transient `Dag` (never added to a session) of `version`: its definition and
    file, the DAG row `latest`'s flags; the commit `bundle_version` (default: the
    version's own), which a run created from it keeps."""
    spec = version.serialized
    return Dag(
        dag_id=version.dag_id,
        fileloc=version.fileloc,
        is_paused=latest.is_paused if latest is not None else False,
        is_active=latest.is_active if latest is not None else True,
        schedule=latest.schedule if latest is not None else None,
        version_hash=version.version_hash,
        serialized=spec,
        max_active_runs=spec.get("max_active_runs", 16),
        max_active_tasks=spec.get("max_active_tasks", 32),
        bundle_version=bundle_version or version.commit_sha,
        version_id=version.id,
    )


class SerializedDagCache:
    def __init__(self) -> None:
        self._rows: dict[str, Dag] = {}
        self._checked: dict[str, float] = {}
        self._versions: LRUCache[tuple[str, str], Dag] = LRUCache(maxsize=VERSIONS_KEPT)

    def get_many(
        self, session: Session, dag_ids: Iterable[str], max_age: float = 0.0
    ) -> dict[str, Dag]:
        """The Dag rows of `dag_ids` (missing ones left out), fresh as of their hash.

        With `max_age`, a DAG whose hash was checked that recently is not asked for
        again (a new version appears only after a folder sync, which has its own period).
        """
        wanted = sorted(set(dag_ids))
        if not wanted:
            return {}
        clock = time.monotonic()
        if max_age > 0 and all(
            d in self._rows and clock - self._checked.get(d, -1e9) < max_age for d in wanted
        ):
            return {d: self._rows[d] for d in wanted}
        rows = session.execute(select(Dag.dag_id, Dag.version_hash).where(Dag.dag_id.in_(wanted)))
        hashes: dict[str, str] = {dag_id: version for dag_id, version in rows}
        stale = [
            d for d, h in hashes.items() if d not in self._rows or self._rows[d].version_hash != h
        ]
        if stale:
            for row in session.scalars(select(Dag).where(Dag.dag_id.in_(stale))):
                session.expunge(row)
                self._rows[row.dag_id] = row
        for dag_id in hashes:
            self._checked[dag_id] = clock
        return {d: self._rows[d] for d in hashes if d in self._rows}

    def latest(self, dag_id: str) -> Dag | None:
        """The copy of `dag_id` read last, whatever its version (no query)."""
        return self._rows.get(dag_id)

    def cached(
        self, dag_id: str, version_hash: str | None, fileloc: str | None = None
    ) -> Dag | None:
        """The cached Dag row of `dag_id` if it has `version_hash` (and `fileloc`, when
        given: moving a file keeps its DAGs' hash); else None (no query)."""
        cached = self._rows.get(dag_id)
        if cached is None or version_hash is None or cached.version_hash != version_hash:
            return None if version_hash is None else self._versions.get((dag_id, version_hash))
        return cached if fileloc is None or cached.fileloc == fileloc else None

    def get(
        self, session: Session, dag_id: str, version_hash: str | None, fileloc: str | None = None
    ) -> Dag | None:
        """The Dag row of `dag_id`; no query when the cached copy has `version_hash` (and
        `fileloc`, when given; a copy of another file is read again)."""
        found = self.cached(dag_id, version_hash, fileloc)
        if found is not None:
            return found
        if fileloc is not None and dag_id in self._rows and self._rows[dag_id].fileloc != fileloc:
            del self._rows[dag_id]  # the file moved: same hash, new path
        latest = self.get_many(session, [dag_id]).get(dag_id)
        if latest is None or version_hash is None or latest.version_hash == version_hash:
            return latest
        return self.version(session, latest, version_hash) or latest

    def version(self, session: Session, latest: Dag, version_hash: str) -> Dag | None:
        """The DAG `latest` as its version `version_hash` (a transient row, `as_version`);
        None when no `dag_version` has it (a folder bundle's DAG)."""
        key = (latest.dag_id, version_hash)
        found = self._versions.get(key)
        if found is not None:
            return found
        row = version_with_hash(session, latest.dag_id, version_hash)
        if row is None:
            return None
        found = self._versions[key] = as_version(latest, row)
        return found


def dag_of_run(session: Session, run: DagRun) -> Dag | None:
    """The DAG as `run` follows it: its stored row, or for a run of a git bundle's DAG
    that follows another version, that version (a transient row, `as_version`, keeping
    the run's commit). None when the DAG is not stored. Two reads at most; no cache."""
    latest = session.get(Dag, run.dag_id)
    if latest is None or run.bundle_version is None or latest.version_hash == run.dag_hash:
        return latest
    version = version_with_hash(session, run.dag_id, run.dag_hash)
    return latest if version is None else as_version(latest, version, run.bundle_version)


def version_with_hash(session: Session, dag_id: str, version_hash: str) -> DagVersion | None:
    """The newest `dag_version` of `dag_id` whose definition has `version_hash` (several
    commits may share one definition); None for a folder bundle's DAG."""
    return session.scalars(
        select(DagVersion)
        .where(DagVersion.dag_id == dag_id, DagVersion.version_hash == version_hash)
        .order_by(DagVersion.id.desc())
        .limit(1)
    ).first()
