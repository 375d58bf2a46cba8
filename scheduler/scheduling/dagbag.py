"""Keep the `dag` and `dag_file` tables in step with the DAGs folder.

Only files whose (mtime, size) changed are parsed, all of them in one
subprocess (`tasks.parsing`). A failing file is recorded with its error and
its DAGs keep their last good definition; other files are unaffected.
Invariant: one short transaction per sync; rows are upserted, so several
schedulers and CLI calls may sync at once.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session, sessionmaker

from sluice.scheduler.core.bundles import SCHEME as BUNDLE_SCHEME
from sluice.scheduler.core.db import transaction
from sluice.scheduler.core.models import Dag, DagFile
from sluice.scheduler.core.queries.assets import record_references
from sluice.scheduler.core.queries.limits import record_rate_limits
from sluice.scheduler.core.queries.watches import record_watch
from sluice.scheduler.core.settings import SECRET_VARIABLES
from sluice.scheduler.core.text import one_line
from sluice.scheduler.core.upsert import upsert
from sluice.scheduler.scheduling.shapes import shape_columns
from sluice.scheduler.scheduling.timetables import next_dagrun_after, timetable_for
from sluice.tasks.assets import condition_text
from sluice.tasks.loader import list_dag_files
from sluice.tasks.parsing import parse_files
from sluice.tasks.serialize import version_hash

log = logging.getLogger(__name__)


@dataclass
class SyncResult:
    parsed: list[str] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    removed: list[str] = field(default_factory=list)
    folder_missing: bool = False
    """The folder is not there (or is not a folder): nothing was read nor written."""

    @property
    def changed(self) -> bool:
        """Some file was parsed or went away."""
        return bool(self.parsed or self.errors or self.removed)


def _fingerprints(folder: Path) -> dict[str, tuple[int, int]]:
    found: dict[str, tuple[int, int]] = {}
    for path in list_dag_files(folder):
        try:
            stat = path.stat()
        except FileNotFoundError:
            continue
        found[str(path.resolve())] = (stat.st_mtime_ns, stat.st_size)
    return found


def sync_dag_folder(
    factory: sessionmaker[Session],
    folder: Path,
    *,
    parse_timeout: float,
    now: dt.datetime,
    drop_env: Collection[str] = SECRET_VARIABLES,
) -> SyncResult:
    """Parse what changed in `folder` and record it; return what was done. The parser's
    environment lacks the variables `drop_env` names (by default every secret one:
    `Settings.hidden_from_tasks` keeps those `SLUICE_TASK_ENV_ALLOW` lets through).

    A folder that is not there changes nothing (`folder_missing`): a folder unmounted
    or mistyped must not retire every DAG it held.
    """
    result = SyncResult()
    if not folder.is_dir():
        result.folder_missing = True
        return result
    on_disk = _fingerprints(folder)
    with factory() as session:
        known = {row.fileloc: (row.mtime_ns, row.size) for row in session.scalars(select(DagFile))}
    under_folder = str(folder.resolve())
    changed = sorted(path for path, fp in on_disk.items() if known.get(path) != fp)
    gone = sorted(p for p in known if p not in on_disk and p.startswith(under_folder))
    if not changed and not gone:
        return result
    parsed = parse_files(changed, parse_timeout, drop_env=drop_env) if changed else {}
    with transaction(factory) as session:
        for path in gone:
            session.execute(delete(DagFile).where(DagFile.fileloc == path))
            session.execute(update(Dag).where(Dag.fileloc == path).values(is_active=False))
            result.removed.append(path)
        for path in changed:
            outcome = parsed.get(path) or {"dags": [], "error": "file was not parsed"}
            error = outcome.get("error")
            if error is None:
                error = record_dags(session, path, outcome["dags"], now)
            mtime_ns, size = on_disk[path]
            upsert(
                session,
                DagFile,
                {
                    "fileloc": path,
                    "mtime_ns": mtime_ns,
                    "size": size,
                    "import_error": error,
                    "parsed_at": now,
                },
                keys=["fileloc"],
                update=["mtime_ns", "size", "import_error", "parsed_at"],
            )
            result.parsed.append(path)
            if error:
                result.errors[path] = error
                log.warning("DAG file %s failed: %s", one_line(path), one_line(error))
    return result


def record_dags(
    session: Session,
    path: str,
    dags: list[dict[str, Any]],
    now: dt.datetime,
    extra: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> str | None:
    """Upsert the DAGs of one good file (`path`: its place, or a git bundle's
    `bundle://` location); return an error if a dag_id clashes with another active
    file's, of any bundle. `extra` gives more columns of a DAG's row from its spec."""
    ids = [spec["dag_id"] for spec in dags]
    rows = session.execute(
        select(Dag.dag_id, Dag.fileloc).where(
            Dag.dag_id.in_(ids), Dag.fileloc != path, Dag.is_active.is_(True)
        )
    ).all()
    clashes = [(d, f) for d, f in rows if f.startswith(BUNDLE_SCHEME) or Path(f).exists()]
    if clashes:
        dag_id, other = clashes[0]
        return f"DagDefinitionError: dag_id {dag_id!r} is already defined in {other}"
    session.execute(
        update(Dag).where(Dag.fileloc == path, Dag.dag_id.not_in(ids)).values(is_active=False)
    )
    existing = {row.dag_id: row for row in session.scalars(select(Dag).where(Dag.dag_id.in_(ids)))}
    shapeless = set(
        session.scalars(select(Dag.dag_id).where(Dag.dag_id.in_(ids), Dag.task_order.is_(None)))
    )
    for spec in dags:
        dag_id = spec["dag_id"]
        more = extra(spec) if extra is not None else {}
        _record_dag(session, path, spec, existing.get(dag_id), now, dag_id in shapeless, more)
    return None


def _record_dag(
    session: Session,
    path: str,
    spec: dict[str, Any],
    row: Dag | None,
    now: dt.datetime,
    shapeless: bool,
    more: dict[str, Any],
) -> None:
    """Upsert one DAG; its shape (`scheduling.shapes`) is computed again only for a new
    DAG or version, or a row recorded without one (`shapeless`)."""
    schedule = spec.get("schedule")
    version = version_hash(spec)
    reshaped = shapeless or row is None or row.version_hash != version
    values: dict[str, Any] = {
        "dag_id": spec["dag_id"],
        "fileloc": path,
        "is_active": True,
        "schedule": _schedule_text(schedule),
        "version_hash": version,
        "serialized": spec,
        **(shape_columns(spec) if reshaped else {}),
        "max_active_runs": spec["max_active_runs"],
        "max_active_tasks": spec["max_active_tasks"],
        "last_parsed_at": now,
        "import_error": None,
        "bundle_version": None,  # a folder's DAG is not versioned
        "version_id": None,
        **more,
    }
    timing_changed = row is None or (
        row.serialized.get("schedule") != schedule
        or row.serialized.get("start_date") != spec.get("start_date")
        or row.serialized.get("end_date") != spec.get("end_date")
        or row.serialized.get("catchup") != spec.get("catchup")
    )
    if timing_changed:
        values.update(next_run_fields(spec, None, now))
    upsert(
        session,
        Dag,
        values,
        keys=["dag_id"],
        update=[k for k in values if k != "dag_id"],
    )
    if reshaped:
        record_references(session, spec["dag_id"], spec, now)
        record_watch(session, spec["dag_id"], spec, now)
        record_rate_limits(session, spec, now)


def next_run_fields(
    spec: dict[str, Any], last_logical_date: dt.datetime | None, now: dt.datetime
) -> dict[str, dt.datetime | None]:
    """`next_dagrun` and `next_dagrun_create_after` for a DAG after `last_logical_date`."""
    timetable = timetable_for(spec)
    if timetable is None:
        return {"next_dagrun": None, "next_dagrun_create_after": None}
    logical = next_dagrun_after(spec, last_logical_date, now)
    if logical is None:
        return {"next_dagrun": None, "next_dagrun_create_after": None}
    return {"next_dagrun": logical, "next_dagrun_create_after": timetable.interval_end(logical)}


def _schedule_text(schedule: Any) -> str | None:
    if schedule is None:
        return None
    if isinstance(schedule, dict) and "assets" in schedule:
        return f"assets: {condition_text(schedule['assets'])}"[:250]
    if isinstance(schedule, dict) and "watch" in schedule:
        watch = schedule["watch"]
        return f"watch: {watch['function']} every {watch['interval']:g}s"[:250]
    if isinstance(schedule, dict):
        return f"every {schedule['seconds']:g}s"
    return str(schedule)
