"""`sluice db clean --before DATE [--dry-run] [--yes]`: delete the finished runs that
ended before DATE, with their task instances, logs, callbacks and audit events
(`scheduler.control.retention`). It lists what it would delete and asks first; unfinished
runs are never touched, nor finished runs whose callbacks are still to be delivered."""

from __future__ import annotations

import argparse
import sys

from sluice.scheduler.cli import timefmt
from sluice.scheduler.cli.context import Cli, CliError
from sluice.scheduler.cli.tables import Col, console, print_table
from sluice.scheduler.control.inputs import parse_date
from sluice.scheduler.control.retention import (
    Deleted,
    awaiting_callbacks,
    delete_expired,
    expired_by_dag,
)
from sluice.scheduler.core.db import utcnow

COLUMNS = (
    Col("dag_id"),
    Col("runs", keep=True, right=True),
    Col("task instances", keep=True, right=True),
    Col("oldest end", keep=True),
    Col("newest end", keep=True),
)


def add_parser(db_cmds: argparse._SubParsersAction) -> None:
    p = db_cmds.add_parser(
        "clean", help="delete finished runs that ended before a date, with their history"
    )
    p.add_argument(
        "--before",
        required=True,
        metavar="DATE",
        help="ISO 8601 date or datetime (UTC unless it says otherwise)",
    )
    p.add_argument("--dry-run", action="store_true", help="list what would go, delete nothing")
    p.add_argument("--yes", action="store_true", help="do not ask before deleting")
    p.set_defaults(func=clean)


def clean(cli: Cli, args: argparse.Namespace) -> int:
    before = parse_date(args.before, "--before")
    with cli.factory() as session:
        expired = expired_by_dag(session, before)
        waiting = awaiting_callbacks(session, before)
    when = before.isoformat()
    if waiting:
        print(f"kept {waiting:,} finished runs whose callbacks are still to be delivered")
    if not expired:
        print(f"nothing to delete: no finished run ended before {when}")
        return 0
    now = utcnow()
    rows = [
        (
            e.dag_id,
            f"{e.runs:,}",
            f"{e.task_instances:,}",
            timefmt.when(e.oldest_end, now),
            timefmt.when(e.newest_end, now),
        )
        for e in expired
    ]
    print_table(console(), COLUMNS, rows, notes=[timefmt.TIMES_NOTE])
    runs = sum(e.runs for e in expired)
    tis = sum(e.task_instances for e in expired)
    what = f"{runs:,} finished runs with {tis:,} task instances that ended before {when}"
    if args.dry_run:
        print(f"dry run: would delete {what}; nothing deleted")
        return 0
    if not args.yes and not _confirmed(what):
        raise CliError(f"nothing deleted: pass --yes to delete {what}")
    deleted = delete_expired(cli.factory, before, progress=_progress)
    print(f"deleted {deleted.runs:,} runs with {deleted.task_instances:,} task instances")
    return 0


def _confirmed(what: str) -> bool:
    """Asked at a terminal only: whether to delete `what`."""
    if not sys.stdin.isatty():
        return False
    answer = input(f"delete {what}? [y/N] ")
    return answer.strip().lower() in ("y", "yes")


def _progress(done: Deleted) -> None:
    print(f"... {done.runs:,} runs deleted", file=sys.stderr)
