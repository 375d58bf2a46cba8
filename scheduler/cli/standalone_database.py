"""Which database `sluice standalone` may take, checked before it writes anything.

Standalone runs a scheduler and a worker that take up whatever they find: queued tries
are published again, unclaimed runs are driven. On a database that a deployment uses
(a stray `SLUICE_DATABASE_URL`) that is a takeover, so before it migrates, parses a DAG
file or triggers a run, `take_database`:

- creates and migrates a SQLite file that is not there yet, and marks it as its own:
  SQLite's `application_id` header field (`PRAGMA application_id`) is set to
  `STANDALONE_APPLICATION_ID`, in the file itself, so the mark goes where the file goes;
- refuses a database whose schema is not current (or that has none) unless it is a
  SQLite file it marked: standalone never migrates a database it did not create; the
  operator runs `sluice db migrate` (`SchemaNotReady`);
- refuses a database where a process other than itself has a live heartbeat
  (`DatabaseInUse`, naming it): a running job (a scheduler, a backfill, another
  standalone) or a running try (a worker) whose heartbeat is younger than
  `SLUICE_HEARTBEAT_TIMEOUT`. On this host, a process that is gone (by its pid) does
  not count, whatever its heartbeat: a standalone that died is taken up
  (`scheduling.leftovers`).

Only then is a database of its own, at an older revision, upgraded. The check and the
job's registration are not one transaction: two standalones started at the same
moment on one database can both pass it.
"""

from __future__ import annotations

import datetime as dt
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine

from sluice.scheduler.cli.context import CliError
from sluice.scheduler.cli.render import visible
from sluice.scheduler.core.db import make_session_factory, utcnow
from sluice.scheduler.core.db_wait import database_place
from sluice.scheduler.core.migrate import (
    HEAD,
    SchemaNotReady,
    current_revision,
    missing_sqlite_file,
    upgrade,
)
from sluice.scheduler.core.queries.live_processes import jobs_beating_since, workers_beating_since

if TYPE_CHECKING:
    from sluice.scheduler.cli.context import Cli

STANDALONE_APPLICATION_ID = 0x534C5354
"""The `application_id` of a SQLite file `sluice standalone` created ("SLST")."""

WAY_OUT = (
    "give sluice standalone a database of its own: the default (sqlite:///sluice.db in "
    "this directory, with SLUICE_DATABASE_URL unset) or --database-url URL"
)


class DatabaseInUse(CliError):
    """Another process has a live heartbeat in the database standalone was pointed at."""


def take_database(cli: Cli) -> str | None:
    """Make the database of `cli.settings` ready for standalone, or refuse it (see the
    module); the path of the SQLite file it created, None if the database was there."""
    engine = cli.engine
    created = missing_sqlite_file(engine)
    if created is not None:
        mark_as_own(engine)
        upgrade(engine)
        return created
    revision = current_revision(engine)
    if revision != HEAD and not made_by_standalone(engine):
        raise SchemaNotReady(not_current(cli.settings.database_url, revision))
    if revision is not None:
        refuse_if_in_use(cli)
    if revision != HEAD:
        upgrade(engine)
    return None


def mark_as_own(engine: Engine) -> None:
    """Mark the new SQLite file of `engine` as made by standalone (before its schema)."""
    with engine.begin() as connection:
        connection.exec_driver_sql(f"PRAGMA application_id = {STANDALONE_APPLICATION_ID}")


def made_by_standalone(engine: Engine) -> bool:
    """Whether `engine`'s database is a SQLite file standalone created."""
    if engine.dialect.name != "sqlite":
        return False
    with engine.connect() as connection:
        found = connection.exec_driver_sql("PRAGMA application_id").scalar()
    return found == STANDALONE_APPLICATION_ID


def not_current(url: str, revision: str | None) -> str:
    where = "no schema" if revision is None else f"schema revision {revision}"
    return (
        f"the database at {visible(database_place(url))} has {where} (this Sluice needs "
        f"{HEAD}) and sluice standalone migrates only a database it created: run `sluice "
        f"db migrate` on it first, or {WAY_OUT}"
    )


def refuse_if_in_use(cli: Cli) -> None:
    """Raise `DatabaseInUse` naming the first other live process, if there is one."""
    from sluice.scheduler.jobs.standalone import pid_alive

    now = utcnow()
    cutoff = now - dt.timedelta(seconds=cli.settings.heartbeat_timeout)
    with make_session_factory(cli.engine)() as session:
        jobs = jobs_beating_since(session, cutoff)
        workers = workers_beating_since(session, cutoff)
    found = others_alive(jobs, workers, hostname=socket.gethostname(), alive=pid_alive, now=now)
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        place = visible(database_place(cli.settings.database_url))
        raise DatabaseInUse(f"the database at {place} is in use by {found[0]}{more}; {WAY_OUT}")


def others_alive(
    jobs: Any,
    workers: Any,
    *,
    hostname: str,
    alive: Callable[[int], bool],
    now: dt.datetime,
) -> list[str]:
    """Each other process with a live heartbeat, as `scheduler host:pid, heartbeat 2 s
    ago` (jobs first, then workers); a process of `hostname` that is not `alive` (by
    its pid) is left out."""
    found = []
    for kind, rows in (("", jobs), ("worker", workers)):
        for row in rows:
            if row.hostname == hostname and row.pid is not None and not alive(row.pid):
                continue
            age = max(0, round((now - row.heartbeat).total_seconds()))
            what = visible(f"{kind or row.job_type} {row.hostname}:{row.pid}")
            found.append(f"{what}, heartbeat {age} s ago")
    return found
