"""`sluice tasks logs DAG_ID RUN_ID TASK_ID [--try N] [--raw]`: print what a try captured.

The log goes to stdout as it was stored; a header line (host, attempt, times,
dropped lines) goes to stderr, so that the output can be piped as is. On a terminal,
the control characters a task printed (escape sequences, carriage returns; tab and
newline aside) are spelled out (`\x1b`) rather than obeyed; `--raw` prints them as
they are. The header always spells them out.
"""

from __future__ import annotations

import argparse
import sys

from sqlalchemy.orm import Session

from sluice.scheduler.cli.context import Cli, CliError, iso
from sluice.scheduler.cli.map_index import add_map_index_argument, checked_map_index
from sluice.scheduler.cli.render import visible
from sluice.scheduler.control.explain import ExplainError, explain_ti, main_reasons
from sluice.scheduler.control.inputs import MAX_TRY, check_int
from sluice.scheduler.core.db import utcnow
from sluice.scheduler.core.models import TaskInstance
from sluice.scheduler.core.queries.task_logs import task_log_of
from sluice.scheduler.core.states import TI


def add_logs_parser(tasks_sub: argparse._SubParsersAction) -> None:
    """Add `logs` to the subcommands of `sluice tasks`."""
    p = tasks_sub.add_parser("logs", help="print the captured output of a task's try")
    p.add_argument("dag_id")
    p.add_argument("run_id")
    p.add_argument("task_id")
    p.add_argument(
        "--try", dest="try_number", type=int, default=None, help="try number (default: the latest)"
    )
    p.add_argument(
        "--raw",
        action="store_true",
        help="print control characters as stored, also on a terminal (default: spelled out)",
    )
    add_map_index_argument(p, "the index of a mapped task")
    p.set_defaults(func=show_logs)


NEVER_RUN: dict[TI, str] = {
    TI.SKIPPED: "was skipped",
    TI.UPSTREAM_FAILED: "was set upstream_failed",
    TI.REMOVED: "was removed",
    TI.SUCCESS: "was marked success",
    TI.FAILED: "was marked failed",
}
"""Finished states a task instance can reach without a try: it never ran and never will
(unless cleared), so it has no log; what `logs` says of each."""


def never_ran(cli: Cli, session: Session, args: argparse.Namespace, ti: TaskInstance) -> str:
    """One line: the TI ended without a try, and why (`sluice tasks explain`'s reasons)."""
    said = f"task {args.task_id!r} of run {args.run_id!r} {NEVER_RUN[TI(ti.state)]} and never ran"
    try:
        explanation = explain_ti(
            session,
            args.dag_id,
            args.run_id,
            args.task_id,
            utcnow(),
            workers_by_queue=None,
            settings=cli.settings,
            map_index=None if ti.map_index < 0 else ti.map_index,
        )
    except ExplainError:
        return visible(f"{said}: it has no log")
    why = main_reasons(explanation.reasons)
    return visible(f"{said}: {'; '.join(why)}" if why else f"{said}: it has no log")


def stdout_is_terminal() -> bool:
    return sys.stdout.isatty()


def show_logs(cli: Cli, args: argparse.Namespace) -> int:
    if args.try_number is not None:
        check_int(args.try_number, "--try", 1, MAX_TRY)
    with cli.factory() as session:
        _, ti = cli.get_ti(session, args.dag_id, args.run_id, args.task_id, checked_map_index(args))
        number = args.try_number if args.try_number is not None else ti.try_number
        if number == 0 and TI(ti.state) in NEVER_RUN:
            print(never_ran(cli, session, args, ti), file=sys.stderr)
            return 0
        if number == 0:
            raise CliError(f"task {args.task_id!r} of run {args.run_id!r} has not run yet")
        stored = task_log_of(session, ti.id, number)
        if stored is None:
            if number > ti.try_number:
                raise CliError(
                    f"task {args.task_id!r} of run {args.run_id!r} has no try {number} "
                    f"(its latest is {ti.try_number})"
                )
            print(f"no log stored for try {number}", file=sys.stderr)
            return 0
    end = f"finished {iso(stored.finished_at)}" if stored.finished_at else "still running"
    header = (
        f"# {args.dag_id} {args.run_id} {args.task_id} try {number} on {stored.hostname or '?'}"
        f" (attempt {stored.attempt_id}), started {iso(stored.started_at)}, {end}"
    )
    print(visible(header), file=sys.stderr)
    if stored.dropped_lines:
        print(f"# {stored.dropped_lines} earlier line(s) dropped (size cap)", file=sys.stderr)
    if stored.content:
        raw = args.raw or not stdout_is_terminal()
        print(stored.content if raw else visible(stored.content, keep_lines=True))
    return 0
