"""Where a worker finds the file of the DAG a try runs.

A folder bundle's DAG names its file by path (`dag.fileloc`). A git bundle's names it
`bundle://<bundle>/<path>`, and its run keeps a commit (`dag_run.bundle_version`): the
file is that commit's, in this host's checkout of it (`core.bundles`), never the branch
head. The checkout is made on first use and shared by every process of the host.
"""

from __future__ import annotations

import functools

from sluice.scheduler.core.bundles import bundles_of
from sluice.scheduler.core.bundles import local_file as bundles_local_file
from sluice.scheduler.core.settings import Settings

_bundles = functools.lru_cache(maxsize=4)(bundles_of)
"""This process's git bundles, by its settings (one `GitBundle` each, kept)."""


def local_file(settings: Settings, fileloc: str, bundle_version: str | None) -> str:
    """The local path of `fileloc` as of `bundle_version` (`core.bundles.local_file`, with
    this process's bundles). LookupError for a git bundle this worker does not know or a
    run without a commit; BundleError (one line) when the commit cannot be fetched or
    checked out: the try fails with it, and retries apply."""
    return bundles_local_file(_bundles(settings), fileloc, bundle_version, "worker")
