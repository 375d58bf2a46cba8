"""`/api/v1/dags/{dag_id}/versions`: the versions of a git bundle's DAG, its file's code
at one of them, and the tasks one version adds and removes against another.

A folder's DAG keeps no versions: its list is empty (`versioned` false), and no commit
names one of its versions (404). A version is named by its commit: the full sha, or a
prefix of it (4 to 40 lower-case hex characters) that names one version of the DAG.

The code is read from the bundle's mirror on this host (`core.bundles.GitBundle`, which
fetches the remote first when the mirror lacks the commit), after the version's row is
read in a session of its own, closed before git runs: a slow git holds no database
connection. A git that fails is a 503 whose detail names the bundle, never its URL (which
may hold a credential); the API's log has git's message.
"""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import APIRouter, Path, Query
from sqlalchemy.orm import Session

from sluice.scheduler.api.deps import CanRead, DbSession, State
from sluice.scheduler.api.errors import ApiError, not_found
from sluice.scheduler.api.lookups import find_dag
from sluice.scheduler.api.paging import PAGE_MAX
from sluice.scheduler.api.responses import errors
from sluice.scheduler.api.schemas import (
    SHA_PATTERN,
    VersionChanges,
    VersionCode,
    VersionList,
    VersionOut,
)
from sluice.scheduler.core.bundles import BundleError, bundles_of, parse_location
from sluice.scheduler.core.models import DagVersion
from sluice.scheduler.core.queries.version_reads import (
    SHORT_SHA,
    task_changes,
    version_at,
    version_before,
)
from sluice.scheduler.core.queries.versions import dag_versions

log = logging.getLogger(__name__)

CODE_MAX = 1024 * 1024
"""The most of a DAG file's bytes the code page shows (1 MiB)."""

router = APIRouter(prefix="/api/v1/dags/{dag_id}/versions", tags=["versions"])

Sha = Annotated[
    str,
    Path(
        pattern=SHA_PATTERN,
        description="the version's commit: its full sha, or a prefix of at least 4 characters",
        examples=["3f2a9c41d0be"],
    ),
]


def find_version(session: Session, dag_id: str, sha: str, *, definition: bool = True) -> DagVersion:
    """The version of the DAG `dag_id` recorded at commit `sha`, or 404."""
    found = version_at(session, dag_id, sha, definition=definition)
    if found is None:
        short = " (or more than one: give more of its sha)" if len(sha) < 40 else ""
        raise not_found(f"DAG {dag_id!r} has no version at commit {sha!r}{short}")
    return found


@router.get("", response_model=VersionList, dependencies=[CanRead], responses=errors(404))
def list_versions(
    dag_id: str,
    session: DbSession,
    limit: Annotated[
        int, Query(ge=1, le=PAGE_MAX, description="how many of the newest versions")
    ] = 100,
) -> VersionList:
    """The DAG's versions, the newest commit first, as `sluice dags versions` lists them:
    each with its commit, author, subject, task ids and the runs created with it."""
    dag = find_dag(session, dag_id)
    found = dag_versions(session, dag.dag_id, limit=limit)
    return VersionList(
        dag_id=dag.dag_id,
        versioned=parse_location(dag.fileloc) is not None,
        versions=[
            VersionOut(
                sha=v["commit_sha"],
                short=v["commit_sha"][:SHORT_SHA],
                bundle=v["bundle"],
                fileloc=v["fileloc"],
                committed_at=v["committed_at"],
                author=v["author"],
                subject=v["subject"],
                runs=v["runs"],
                tasks=v["tasks"],
            )
            for v in found
        ],
    )


@router.get(
    "/{sha}/code", response_model=VersionCode, dependencies=[CanRead], responses=errors(404)
)
def version_code(dag_id: str, sha: Sha, state: State) -> VersionCode:
    """The DAG's file as it was at that version (its first 1 MiB)."""
    with state.factory() as session:  # closed before git runs
        dag = find_dag(session, dag_id)
        version = find_version(session, dag.dag_id, sha, definition=False)
    place = parse_location(version.fileloc)
    bundle = bundles_of(state.settings).get(place[0]) if place is not None else None
    if place is None or bundle is None:
        name = place[0] if place is not None else version.bundle
        raise not_found(
            f"the code of DAG {dag_id!r} at {version.commit_sha[:SHORT_SHA]} cannot be read "
            f"here: DAG bundle {name!r} is not in SLUICE_DAG_BUNDLES"
        )
    try:
        bundle.resolve(version.commit_sha)  # fetched first if the mirror lacks it
        text = bundle.read_file(version.commit_sha, place[1], limit=CODE_MAX + 1)
    except BundleError as exc:
        log.warning("reading %s at %s failed: %s", version.fileloc, version.commit_sha, exc)
        raise ApiError(
            503,
            f"DAG bundle {bundle.name!r} cannot be read now; try again (the API's log says why)",
        ) from None
    encoded = text.encode("utf-8")
    truncated = len(encoded) > CODE_MAX
    if truncated:
        text = encoded[:CODE_MAX].decode("utf-8", errors="ignore")
    return VersionCode(
        dag_id=dag.dag_id,
        sha=version.commit_sha,
        short=version.commit_sha[:SHORT_SHA],
        subject=version.subject,
        author=version.author,
        committed_at=version.committed_at,
        fileloc=version.fileloc,
        path=place[1],
        content=text,
        truncated=truncated,
    )


@router.get(
    "/{sha}/changes",
    response_model=VersionChanges,
    dependencies=[CanRead],
    responses=errors(404),
)
def version_changes(
    dag_id: str,
    sha: Sha,
    session: DbSession,
    since: Annotated[
        str | None,
        Query(
            pattern=SHA_PATTERN,
            description="the version to compare with (its commit); default: the one before",
        ),
    ] = None,
) -> VersionChanges:
    """The task ids the version at `sha` adds and removes against the version at `since`
    (by default the DAG's version before it; for its first version, every task is added)."""
    dag = find_dag(session, dag_id)
    version = find_version(session, dag.dag_id, sha)
    other = (
        find_version(session, dag.dag_id, since)
        if since is not None
        else version_before(session, version)
    )
    added, removed = task_changes(
        other.serialized if other is not None else None, version.serialized
    )
    return VersionChanges(
        dag_id=dag.dag_id,
        sha=version.commit_sha,
        since=other.commit_sha if other is not None else None,
        added=added,
        removed=removed,
    )
