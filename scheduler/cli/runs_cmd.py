"""`sluice dags runs DAG_ID [--state S] [--limit N] [--json]`: a DAG's runs, newest first.

Newest means the latest logical date first (as Airflow's run list). Each run shows its
run id, type, state, logical date, start and duration. `--state` and `--limit` are
checked before the database is read; `--json` writes one JSON document (a list) to
stdout, and the note on runs left out goes to stderr. The run table is shared with
`sluice backfill`'s summary (`print_runs`).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import func, select

from sluice.scheduler.cli.context import Cli, CliError, iso
from sluice.scheduler.cli.render import visible
from sluice.scheduler.cli.tables import Col, console, print_table
from sluice.scheduler.cli.timefmt import TIMES_NOTE, duration, duration_text, when
from sluice.scheduler.control.inputs import INT_MAX, InputError, check_int
from sluice.scheduler.core.db import utcnow
from sluice.scheduler.core.models import DagRun
from sluice.scheduler.core.states import DagRunState

DEFAULT_LIMIT = 25
RUN_STATES = [str(s) for s in DagRunState]

RUN_COLUMNS = (
    Col("run_id"),
    Col("type", keep=True),
    Col("state", keep=True),
    Col("logical date", keep=True),
    Col("start", keep=True),
    Col("duration", keep=True, right=True),
)


def add_runs_parser(cmds: argparse._SubParsersAction) -> None:
    p = cmds.add_parser(
        "runs",
        help="a DAG's runs, newest logical date first",
        description="List a DAG's runs, newest logical date first: run id, type, state, "
        "logical date, start and duration (times in UTC).",
    )
    p.add_argument("dag_id")
    p.add_argument("--state", help=f"only runs in this state: {', '.join(RUN_STATES)}")
    p.add_argument(
        "--limit",
        default=str(DEFAULT_LIMIT),
        metavar="N",
        help=f"at most N runs, the newest (default {DEFAULT_LIMIT})",
    )
    p.add_argument("--json", action="store_true", help="print the runs as one JSON list")
    p.set_defaults(func=list_runs)


def checked_state(text: str | None) -> DagRunState | None:
    """The `--state` asked for, or a CliError naming the states there are."""
    if text is None:
        return None
    if text not in RUN_STATES:
        raise CliError(f"--state must be one of {', '.join(RUN_STATES)}, got {visible(repr(text))}")
    return DagRunState(text)


def checked_limit(text: str) -> int:
    """The `--limit` asked for: a whole number from 1 up, or a CliError."""
    try:
        number = int(text.strip(), 10)
    except ValueError:
        raise CliError(
            f"--limit must be a whole number of runs, got {visible(repr(text))}"
        ) from None
    try:
        return check_int(number, "--limit", 1, INT_MAX)
    except InputError as exc:
        raise CliError(str(exc)) from None


def run_json(run: DagRun, now: dt.datetime) -> dict[str, Any]:
    """A run as `--json` gives it; `duration_seconds` is null until the run has ended."""
    return {
        "dag_id": run.dag_id,
        "run_id": run.run_id,
        "run_type": str(run.run_type),
        "state": str(run.state),
        "logical_date": iso(run.logical_date),
        "queued_at": iso(run.queued_at),
        "start_date": iso(run.start_date),
        "end_date": iso(run.end_date),
        "duration_seconds": (
            None
            if run.end_date is None
            else round(duration(run.start_date, run.end_date, now) or 0.0, 3)
        ),
    }


def print_runs(
    runs: Sequence[DagRun], now: dt.datetime, *, notes: Iterable[str] = (), empty: str
) -> None:
    """The run table (times of today as HH:MM:SS), then `notes`."""
    rows = [
        (
            run.run_id,
            str(run.run_type),
            str(run.state),
            when(run.logical_date, now),
            when(run.start_date, now),
            duration_text(run.start_date, run.end_date, now),
        )
        for run in runs
    ]
    shown = [TIMES_NOTE, *notes] if rows else list(notes)
    print_table(console(), RUN_COLUMNS, rows, notes=shown, empty=empty)


def list_runs(cli: Cli, args: argparse.Namespace) -> int:
    state = checked_state(args.state)
    limit = checked_limit(args.limit)
    now = utcnow()
    with cli.factory() as session:
        cli.get_dag(session, args.dag_id)
        where = [DagRun.dag_id == args.dag_id]
        if state is not None:
            where.append(DagRun.state == state)
        runs = session.scalars(
            select(DagRun)
            .where(*where)
            .order_by(DagRun.logical_date.desc(), DagRun.id.desc())
            .limit(limit)
        ).all()
        total = len(runs)
        if total == limit:
            total = session.scalar(select(func.count()).select_from(DagRun).where(*where)) or 0
    more = (
        [f"the newest {len(runs)} of {total} runs are shown: --limit N for more"]
        if total > len(runs)
        else []
    )
    if args.json:
        print(json.dumps([run_json(run, now) for run in runs], indent=2))
        for line in more:
            print(line, file=sys.stderr)
        return 0
    which = f" in state {state}" if state is not None else ""
    print_runs(runs, now, notes=more, empty=f"DAG {visible(args.dag_id)} has no runs{which}")
    return 0
