"""Keep the `dag`, `dag_version` and `dag_file` tables in step with the DAG bundles.

A folder bundle is synced as the DAGs folder always was (`dagbag.sync_dag_folder`). A git
bundle is fetched; each commit since the one last parsed that changes the DAGs' folder
(and the new head, whatever it changes) is checked out and parsed in the parser
subprocess, oldest first, each recorded in one short transaction with the bundle's new
head (`bundle_state.head_commit`): a scheduler killed midway resumes after the last
commit recorded. For each DAG a commit defines, a `dag_version` row is written when its
definition or its file's bytes differ from its latest version; the `dag` row then points
at the version and the commit (`bundle_version`, `version_id`), which new runs keep.

A file that fails at a commit is an import error of that commit (its `dag_file` row,
`bundle://` location): its DAGs keep their last good version, and runs of earlier
versions go on. A fetch that fails keeps the last commit parsed; `bundle_state` says
since when and why (`sluice status`).

Invariant: rows are upserted (`ON CONFLICT`), so several schedulers and CLI calls may
sync at once and write the same rows.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session, sessionmaker

from sluice.scheduler.core.bundles import (
    BundleError,
    GitBundle,
    bundles_of,
    location,
    parse_location,
)
from sluice.scheduler.core.dag_cache import as_version
from sluice.scheduler.core.db import transaction
from sluice.scheduler.core.models import BundleState, Dag, DagFile, DagVersion
from sluice.scheduler.core.settings import Settings
from sluice.scheduler.core.text import one_line
from sluice.scheduler.core.upsert import insert_unless_clash, upsert
from sluice.scheduler.scheduling.dagbag import SyncResult, record_dags, sync_dag_folder
from sluice.tasks.loader import list_dag_files
from sluice.tasks.parsing import parse_files
from sluice.tasks.serialize import version_hash

log = logging.getLogger(__name__)


@dataclass
class BundlesSynced:
    """What one sync of every bundle did."""

    changed: bool = False
    folders_missing: list[str] = field(default_factory=list)
    fetch_errors: dict[str, str] = field(default_factory=dict)


def sync_bundles(
    factory: sessionmaker[Session],
    settings: Settings,
    gits: dict[str, GitBundle],
    *,
    now: dt.datetime,
) -> BundlesSynced:
    """Sync every bundle of `settings` (`gits`: its git bundles, by name)."""
    done = BundlesSynced()
    for spec in settings.bundles:
        if spec.kind == "folder":
            assert spec.path is not None
            synced = sync_dag_folder(
                factory,
                spec.path,
                parse_timeout=settings.parse_timeout,
                now=now,
                drop_env=settings.hidden_from_tasks,
            )
            done.changed |= synced.changed
            if synced.folder_missing:
                done.folders_missing.append(str(spec.path))
            continue
        try:
            done.changed |= sync_git_bundle(factory, settings, gits[spec.name], now=now).changed
        except BundleError as exc:
            done.fetch_errors[spec.name] = str(exc)
            _record_fetch_failure(factory, spec.name, str(exc), now)
    return done


def sync_git_bundle(
    factory: sessionmaker[Session], settings: Settings, bundle: GitBundle, *, now: dt.datetime
) -> SyncResult:
    """Fetch `bundle` and record each commit since the last parsed (BundleError if the
    fetch fails: nothing is written but the caller's failure)."""
    head = bundle.fetch()
    with transaction(factory) as session:
        state = session.get(BundleState, bundle.name)
        last = state.head_commit if state is not None else None
        _record_fetched(session, bundle.name, now)
    result = SyncResult()
    if last == head:
        return result
    for sha in bundle.commits_between(last, head):
        record_commit(factory, settings, bundle, sha, now=now, result=result)
    return result


def record_commit(
    factory: sessionmaker[Session],
    settings: Settings,
    bundle: GitBundle,
    sha: str,
    *,
    now: dt.datetime,
    result: SyncResult | None = None,
    as_head: bool = True,
    only: str | None = None,
) -> dict[str, int]:
    """Parse commit `sha` of `bundle` and record its DAGs' versions (and, `as_head`, the
    DAGs' rows and the bundle's head; else, with `only`, that DAG's version alone);
    dag_id → its version's id at that commit."""
    result = result if result is not None else SyncResult()
    root = bundle.checkout(sha)
    folder = root / bundle.spec.subdir
    files = [str(p) for p in list_dag_files(folder)]
    parsed = parse_files(files, settings.parse_timeout, drop_env=settings.hidden_from_tasks)
    info = bundle.commit_info(sha)
    committed_at = dt.datetime.fromisoformat(info.date).astimezone(dt.UTC)
    versions: dict[str, int] = {}
    with transaction(factory) as session:
        seen: set[str] = set()
        for path in files:
            relative = Path(path).relative_to(root).as_posix()
            fileloc = location(bundle.name, relative)
            seen.add(fileloc)
            outcome = parsed.get(path) or {"dags": [], "error": "file was not parsed"}
            error = outcome.get("error")
            specs = [dict(spec, fileloc=fileloc) for spec in outcome["dags"]]
            source = hashlib.sha256(Path(path).read_bytes()).hexdigest()
            if error is None:

                def version_id(
                    spec: dict[str, Any], fileloc: str = fileloc, source: str = source
                ) -> int:
                    found = _version_of(
                        session, bundle.name, sha, spec, fileloc, source, info, committed_at, now
                    )
                    versions[spec["dag_id"]] = found
                    return found

                if as_head:  # a DAG's version is recorded once its dag_id is known not to clash
                    error = record_dags(
                        session,
                        fileloc,
                        specs,
                        now,
                        extra=lambda spec: {"bundle_version": sha, "version_id": version_id(spec)},
                    )
                else:
                    for spec in specs:
                        if only is None or spec["dag_id"] == only:
                            version_id(spec)
            if not as_head:
                if error is not None:
                    result.errors[fileloc] = one_line(error)
                continue
            if error is not None:
                error = f"{one_line(error)} (commit {sha[:12]}: {one_line(info.subject)[:80]})"
                result.errors[fileloc] = error
                log.warning("DAG file %s failed at %s: %s", fileloc, sha[:12], error)
            upsert(
                session,
                DagFile,
                {
                    "fileloc": fileloc,
                    "mtime_ns": 0,
                    "size": 0,
                    "import_error": error,
                    "parsed_at": now,
                },
                keys=["fileloc"],
                update=["mtime_ns", "size", "import_error", "parsed_at"],
            )
            result.parsed.append(fileloc)
        if as_head:
            _retire_gone_files(session, bundle.name, seen, result)
            session.execute(
                update(BundleState).where(BundleState.name == bundle.name).values(head_commit=sha)
            )
    return versions


def _version_of(
    session: Session,
    bundle: str,
    sha: str,
    spec: dict[str, Any],
    fileloc: str,
    source: str,
    info: Any,
    committed_at: dt.datetime,
    now: dt.datetime,
) -> int:
    """The id of the DAG's version at commit `sha`: its latest version's when neither its
    definition nor its file changed since, else a new row (or the row of `sha`)."""
    dag_id = spec["dag_id"]
    digest = version_hash(spec)
    at_commit = select(DagVersion.id).where(
        DagVersion.dag_id == dag_id, DagVersion.commit_sha == sha
    )
    found = session.scalar(at_commit)
    if found is not None:
        return found
    latest = session.execute(
        select(DagVersion.id, DagVersion.version_hash, DagVersion.source_hash)
        .where(DagVersion.dag_id == dag_id, DagVersion.bundle == bundle)
        .order_by(DagVersion.id.desc())
        .limit(1)
    ).first()
    if latest is not None and (latest.version_hash, latest.source_hash) == (digest, source):
        return int(latest.id)
    row = insert_unless_clash(
        session,
        DagVersion,
        {
            "dag_id": dag_id,
            "bundle": bundle,
            "commit_sha": sha,
            "version_hash": digest,
            "source_hash": source,
            "fileloc": fileloc,
            "serialized": spec,
            "author": info.author,
            "committed_at": committed_at,
            "subject": info.subject,
            "created_at": now,
        },
    )
    if row is not None:
        return int(row.id)
    found = session.scalar(at_commit)  # another scheduler recorded it meanwhile
    assert found is not None
    return int(found)


def _retire_gone_files(
    session: Session, bundle: str, seen: Collection[str], result: SyncResult
) -> None:
    """Files of the bundle that the commit no longer has: their rows go, their DAGs are
    no longer active."""
    known = session.scalars(select(DagFile.fileloc)).all()
    for fileloc in known:
        place = parse_location(fileloc)
        if place is None or place[0] != bundle or fileloc in seen:
            continue
        session.execute(delete(DagFile).where(DagFile.fileloc == fileloc))
        session.execute(update(Dag).where(Dag.fileloc == fileloc).values(is_active=False))
        result.removed.append(fileloc)


def _record_fetched(session: Session, name: str, now: dt.datetime) -> None:
    upsert(
        session,
        BundleState,
        {"name": name, "fetched_at": now, "failing_since": None, "error": None},
        keys=["name"],
        update=["fetched_at", "failing_since", "error"],
    )


def _record_fetch_failure(
    factory: sessionmaker[Session], name: str, error: str, now: dt.datetime
) -> None:
    """Keep the first failure's time (`failing_since`) and the latest error."""
    with transaction(factory) as session:
        state = session.get(BundleState, name)
        if state is None:
            session.add(BundleState(name=name, failing_since=now, error=error[:2000]))
            return
        if state.failing_since is None:
            state.failing_since = now
            log.warning("fetching DAG bundle %s fails: %s", name, error)
        state.error = error[:2000]


class UnknownVersion(ValueError):
    """A version a run was asked for that cannot be had; the message is one line."""


def dag_at_version(
    factory: sessionmaker[Session], settings: Settings, dag: Dag, rev: str, *, now: dt.datetime
) -> Dag:
    """`dag` (a git bundle's) as of `rev` (a full or short sha, a tag, a branch: resolved
    to the full sha), a transient row a run is created from (`dag_cache.as_version`): the
    run keeps that commit. The commit is parsed (and its version recorded) if no version
    of the DAG was recorded at it. UnknownVersion, one line, if it cannot be."""
    place = parse_location(dag.fileloc)
    if place is None:
        raise UnknownVersion(
            f"DAG {dag.dag_id!r} comes from a folder, which keeps no versions: "
            "a version needs a git bundle (SLUICE_DAG_BUNDLES)"
        )
    bundle = bundles_of(settings).get(place[0])
    if bundle is None:
        raise UnknownVersion(f"DAG bundle {place[0]!r} is not in SLUICE_DAG_BUNDLES")
    try:
        sha = bundle.resolve(rev)
        with factory() as session:
            row = session.scalar(
                select(DagVersion).where(
                    DagVersion.dag_id == dag.dag_id, DagVersion.commit_sha == sha
                )
            )
        if row is None:
            result = SyncResult()
            found = record_commit(
                factory,
                settings,
                bundle,
                sha,
                now=now,
                result=result,
                as_head=False,
                only=dag.dag_id,
            )
            if dag.dag_id not in found:
                why = "; ".join(f"{f}: {e}" for f, e in sorted(result.errors.items()))
                raise UnknownVersion(
                    f"commit {sha[:12]} of bundle {bundle.name!r} has no DAG {dag.dag_id!r}"
                    + (f" ({why[:300]})" if why else "")
                )
            with factory() as session:
                row = session.get(DagVersion, found[dag.dag_id])
        assert row is not None
        return as_version(dag, row, bundle_version=sha)
    except BundleError as exc:
        raise UnknownVersion(str(exc)) from None
