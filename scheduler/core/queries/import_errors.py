"""Why a DAG may be missing: the DAG files whose last parse failed, as one short clause.

`why_missing` is what a lookup of an unknown DAG adds to its error (the CLI's and the
API's): which file failed and why. Invariants: one line, bounded (`MAX_SHOWN` files,
`MAX_ERROR_CHARS` of each error), control characters spelled out; a file whose text
names the DAG id comes first; empty when no file failed. Reads `dag_file` only, no lock.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from sluice.scheduler.core.models import DagFile
from sluice.scheduler.core.text import one_line

MAX_SHOWN = 2
"""Failed files named in one error; `sluice dags list` shows them all."""
MAX_ERROR_CHARS = 200
MAX_READ = 20
"""Failed files whose text is read to find the one naming the DAG id (the rest unread)."""
MAX_FILE_BYTES = 1024 * 1024


@dataclass(frozen=True)
class FailedFile:
    fileloc: str
    error: str


def failed_files(session: Session, folder: Path | None = None) -> list[FailedFile]:
    """The files whose last parse failed, by path; only those under `folder` if given."""
    rows = session.execute(
        select(DagFile.fileloc, DagFile.import_error)
        .where(DagFile.import_error.is_not(None))
        .order_by(DagFile.fileloc)
    ).all()
    found = [FailedFile(fileloc, error or "") for fileloc, error in rows]
    if folder is None:
        return found
    root = str(folder.resolve()) + os.sep
    return [f for f in found if f.fileloc.startswith(root)]


def _names(path: str, dag_id: str) -> bool:
    """Whether the file's text holds `dag_id` quoted (as `DAG("x")` would)."""
    try:
        with open(path, "rb") as file:
            text = file.read(MAX_FILE_BYTES)
    except OSError:
        return False
    wanted = dag_id.encode("utf-8", "replace")
    return any(q + wanted + q in text for q in (b'"', b"'"))


def _shown(path: str, folder: Path | None) -> str:
    """A path as the user knows it: relative to the DAGs folder, else its name."""
    if folder is not None:
        try:
            return str(Path(path).relative_to(folder.resolve()))
        except ValueError:
            pass
    return Path(path).name


def why_missing(
    session: Session, dag_id: str, *, folder: Path | None = None, read_files: bool = False
) -> str:
    """ "" when no DAG file failed, else a clause to append to "unknown DAG 'x'", such as
    "; broken.py failed to import: ZeroDivisionError: division by zero (broken.py, line 3)".

    With `read_files` (a process that sees the DAGs folder), the failed files whose text
    names `dag_id` are put first.
    """
    failed = failed_files(session, folder)
    if not failed:
        return ""
    if read_files:
        naming = {f.fileloc for f in failed[:MAX_READ] if _names(f.fileloc, dag_id)}
        failed.sort(key=lambda f: f.fileloc not in naming)
    root = str(folder.resolve()) + os.sep if folder is not None else None

    def path(f: FailedFile) -> str:
        return one_line(_shown(f.fileloc, folder), MAX_ERROR_CHARS)

    def error(f: FailedFile) -> str:
        return one_line(f.error.replace(root, "") if root else f.error, MAX_ERROR_CHARS)

    if len(failed) == 1:
        return f"; {path(failed[0])} failed to import: {error(failed[0])}"
    shown = "; ".join(f"{path(f)}: {error(f)}" for f in failed[:MAX_SHOWN])
    more = len(failed) - MAX_SHOWN
    rest = f"; and {more} more (sluice dags list)" if more > 0 else ""
    return f"; {len(failed)} DAG files failed to import: {shown}{rest}"
