"""`sluice tasks explain DAG_ID RUN_ID TASK_ID [--json]`: why a TI is in its state.

Reads only (two short read sessions: the TI's state, then the explanation); the
workers are asked which queues they serve, through the broker, only while the TI
can still wait for one (none, scheduled, queued, up_for_retry), outside any
database transaction.
"""

from __future__ import annotations

import argparse
import json

from rich.console import Console
from rich.markup import escape
from sqlalchemy import select

from sluice.scheduler.cli.context import Cli, CliError
from sluice.scheduler.cli.map_index import add_map_index_argument, checked_map_index
from sluice.scheduler.cli.render import visible
from sluice.scheduler.control.explain import (
    WAITS_FOR_A_WORKER,
    ExplainError,
    Explanation,
    explain_ti,
)
from sluice.scheduler.control.inputs import check_seconds
from sluice.scheduler.core.db import utcnow
from sluice.scheduler.core.models import Dag, DagRun, TaskInstance
from sluice.scheduler.core.states import TI


def add_explain_parser(tasks_subparsers: argparse._SubParsersAction) -> None:
    p = tasks_subparsers.add_parser("explain", help="why a task instance is in its state")
    p.add_argument("dag_id")
    p.add_argument("run_id")
    p.add_argument("task_id")
    p.add_argument("--json", action="store_true", help="print the explanation as one JSON document")
    add_map_index_argument(p, "the index of a mapped task")
    p.add_argument(
        "--workers-timeout",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="how long to wait for workers to say which queues they serve (0: do not ask)",
    )
    p.set_defaults(func=explain)


def explain(cli: Cli, args: argparse.Namespace) -> int:
    check_seconds(args.workers_timeout, "--workers-timeout")
    map_index = checked_map_index(args)
    with cli.factory() as session:
        if session.get(Dag, args.dag_id) is None:  # a retired DAG's runs are explained too
            raise cli.unknown_dag(session, args.dag_id)
        state = session.scalar(
            select(TaskInstance.state)
            .join(DagRun, DagRun.id == TaskInstance.dag_run_id)
            .where(
                DagRun.dag_id == args.dag_id,
                DagRun.run_id == args.run_id,
                TaskInstance.task_id == args.task_id,
                TaskInstance.map_index == (-1 if map_index is None else map_index),
            )
        )
    workers = None
    from sluice.scheduler.control.workers import standalone_database, workers_by_queue

    waiting = state is None or TI(state) in WAITS_FOR_A_WORKER
    if args.workers_timeout > 0 and waiting and not standalone_database(cli.settings):
        workers = workers_by_queue(cli.settings, timeout=args.workers_timeout)
    with cli.factory() as session:
        try:
            explanation = explain_ti(
                session,
                args.dag_id,
                args.run_id,
                args.task_id,
                utcnow(),
                workers_by_queue=workers,
                map_index=map_index,
                settings=cli.settings,
            )
        except ExplainError as exc:
            raise CliError(str(exc)) from None
    if args.json:
        print(json.dumps(explanation.to_dict(), indent=2))
    else:
        print_explanation(explanation)
    return 0


def print_explanation(explanation: Explanation, console: Console | None = None) -> None:
    """The summary, then one line per reason (blocking ones marked), then notes."""
    e = explanation
    out = console or Console(highlight=False, soft_wrap=True, emoji=False)
    out.print(
        f"[bold]{shown(e.dag_id)} / {shown(e.run_id)} / {shown(e.task_id)}[/]: "
        f"[bold]{e.state}[/] (try {e.try_number} of {e.max_tries}, queue {shown(e.queue)}, "
        f"pool {shown(e.pool)}; run {e.run_state})"
    )
    out.print(shown(e.summary))
    for reason in e.reasons:
        mark = "[red]●[/]" if reason.blocking else "[dim]○[/]"
        out.print(f"  {mark} [cyan]{reason.kind}[/]: {shown(reason.detail)}")
    for note in e.notes:
        out.print(f"  [dim]note: {shown(note)}[/]")


def shown(text: str) -> str:
    """Stored text inside markup: markup escaped, control characters spelled out."""
    return escape(visible(str(text)))
