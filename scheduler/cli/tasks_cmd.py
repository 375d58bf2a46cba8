"""`sluice tasks …`: the states of a run's tasks; clearing, marking and noting them."""

from __future__ import annotations

import argparse
import datetime as dt
import json
from collections import Counter
from collections.abc import Sequence
from itertools import groupby
from typing import Any

from rich.text import Text
from sqlalchemy import select
from sqlalchemy.orm import Session

from sluice.scheduler.cli.context import Cli, CliError, iso
from sluice.scheduler.cli.explain_cmd import add_explain_parser
from sluice.scheduler.cli.logs_cmd import add_logs_parser
from sluice.scheduler.cli.map_index import add_map_index_argument, checked_map_index
from sluice.scheduler.cli.render import cell, visible
from sluice.scheduler.cli.tables import Col, console, print_table
from sluice.scheduler.cli.timefmt import TIMES_NOTE, duration_text, when
from sluice.scheduler.control import operations
from sluice.scheduler.control.operations import revoke_external_tasks, wake_schedulers
from sluice.scheduler.core.dag_cache import dag_of_run
from sluice.scheduler.core.db import transaction, utcnow
from sluice.scheduler.core.models import Dag, DagRun, TaskInstance
from sluice.scheduler.core.queries.audit import cli_user
from sluice.scheduler.core.states import TI
from sluice.scheduler.scheduling.clearing import (
    NotVersioned,
    UnknownTask,
    clear_task_instances,
    groups_of,
    move_to_latest,
)
from sluice.scheduler.scheduling.marking import TI_MARKS


def add_parsers(sub: argparse._SubParsersAction) -> None:
    tasks = sub.add_parser("tasks", help="inspect and clear task instances")
    cmds = tasks.add_subparsers(dest="tasks_cmd", required=True)
    p = cmds.add_parser("states", help="the task instances of a run")
    p.add_argument("dag_id")
    p.add_argument("run_id")
    p.add_argument("--json", action="store_true", help="print the task instances as one JSON list")
    p.set_defaults(func=states)
    p = cmds.add_parser("clear", help="reset task instances so they run again")
    p.add_argument("dag_id")
    p.add_argument("run_id")
    p.add_argument(
        "task_or_group",
        nargs="?",
        metavar="TASK_OR_GROUP",
        help="clear this task, or this task group's tasks (as --task)",
    )
    p.add_argument(
        "--task",
        action="append",
        dest="task_ids",
        metavar="TASK_ID",
        help="clear this task or task group (repeat for more; default: every task of the run)",
    )
    p.add_argument("--downstream", action="store_true", help="also clear their downstream")
    add_map_index_argument(p, "clear only this index of the one --task (mapped)")
    p.add_argument(
        "--latest-version",
        action="store_true",
        help="move the run to its DAG's latest version first (a git bundle's run)",
    )
    p.set_defaults(func=clear)
    p = cmds.add_parser("mark", help="mark a task instance success, failed or skipped")
    p.add_argument("dag_id")
    p.add_argument("run_id")
    p.add_argument("task_id")
    p.add_argument(
        "--state",
        required=True,
        choices=[str(s) for s in TI_MARKS],
        help="the state the task instance gets",
    )
    p.add_argument("--downstream", action="store_true", help="also mark its downstream")
    p.add_argument("--upstream", action="store_true", help="also mark its upstream")
    p.set_defaults(func=mark)
    p = cmds.add_parser("note", help="set the note of a task instance (one line)")
    p.add_argument("dag_id")
    p.add_argument("run_id")
    p.add_argument("task_id")
    p.add_argument("text")
    p.set_defaults(func=note)
    add_explain_parser(cmds)
    add_logs_parser(cmds)


def ti_rows(session: Session, run: DagRun) -> list[dict[str, Any]]:
    """One row per TI, in creation order (a mapped task's indexes by map index)."""
    tis = session.scalars(
        select(TaskInstance).where(TaskInstance.dag_run_id == run.id).order_by(TaskInstance.id)
    ).all()
    first: dict[str, int] = {}
    for ti in tis:
        first.setdefault(ti.task_id, ti.id)
    tis = sorted(tis, key=lambda ti: (first[ti.task_id], ti.map_index))
    return [
        {
            "task_id": ti.task_id,
            "map_index": None if ti.map_index < 0 else ti.map_index,
            "state": ti.state,
            "try_number": ti.try_number,
            "max_tries": ti.max_tries,
            "queue": ti.queue,
            "pool": ti.pool,
            "hostname": ti.hostname,
            "attempt_id": ti.attempt_id,
            "scheduled_at": iso(ti.scheduled_at),
            "queued_at": iso(ti.queued_at),
            "start_date": iso(ti.start_date),
            "end_date": iso(ti.end_date),
            "queued_by_job_id": ti.queued_by_job_id,
            "error": ti.error,
        }
        for ti in tis
    ]


TI_COLUMNS = (
    Col("task_id"),
    Col("index", keep=True, right=True),
    Col("state", keep=True),
    Col("try", keep=True, right=True),
    Col("queue"),
    Col("start", keep=True),
    Col("duration", keep=True, right=True),
)


def _at(value: str | None) -> dt.datetime | None:
    return None if value is None else dt.datetime.fromisoformat(value)


def ti_key(row: dict[str, Any]) -> str:
    """A TI as notes name it: its task id, with `[i]` for index i of a mapped task."""
    index = row["map_index"]
    return str(row["task_id"]) if index is None else f"{row['task_id']}[{index}]"


def print_states(
    rows: Sequence[dict[str, Any]], as_json: bool, now: dt.datetime | None = None
) -> None:
    """`ti_rows` as one JSON list, or as a table (start of today as HH:MM:SS, duration)
    with, under it, each mapped task's indexes counted by state and each error whole on a
    line of its own."""
    if as_json:
        print(json.dumps(list(rows), indent=2))
        return
    now = now or utcnow()
    table = [
        (
            r["task_id"],
            "" if r["map_index"] is None else r["map_index"],
            str(r["state"] or "none"),
            r["try_number"],
            r["queue"],
            when(_at(r["start_date"]), now),
            duration_text(_at(r["start_date"]), _at(r["end_date"]), now),
        )
        for r in rows
    ]
    notes: list[Text | str] = [TIMES_NOTE] if any(r["start_date"] for r in rows) else []
    for task_id, group in groupby(rows, key=lambda r: r["task_id"]):
        found = list(group)
        if found[0]["map_index"] is not None:  # a mapped task: its indexes by state
            span = f"{found[0]['map_index']}-{found[-1]['map_index']}"
            notes.append(cell(f"{task_id}[{span}]: {states_summary(found)}"))
    for r in rows:
        if r["error"]:
            line = Text(visible(f"{ti_key(r)}, try {r['try_number']}: "), style="red")
            line.append_text(cell(r["error"]))
            notes.append(line)
    print_table(console(), TI_COLUMNS, table, notes=notes)


def states_summary(rows: Sequence[dict[str, Any]]) -> str:
    """A mapped task's indexes counted by state: "2 success, 1 running"."""
    counts = Counter(str(r["state"]) for r in rows)
    return ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))


def states(cli: Cli, args: argparse.Namespace) -> int:
    with cli.factory() as session:
        run = cli.get_run(session, args.dag_id, args.run_id)
        print_states(ti_rows(session, run), args.json)
    return 0


def clear(cli: Cli, args: argparse.Namespace) -> int:
    now = utcnow()
    if args.task_or_group is not None:
        args.task_ids = [*(args.task_ids or []), args.task_or_group]
    map_index = checked_map_index(args)
    if map_index is not None and len(args.task_ids or []) != 1:
        raise CliError("--map-index names an index of one task: give exactly one --task")
    operations.ready_to_wake(cli.settings)
    with transaction(cli.factory) as session:
        run = cli.get_run(session, args.dag_id, args.run_id)
        dag = dag_of_run(session, run)  # the run's own version: a clear keeps it
        assert dag is not None
        try:
            if args.latest_version:
                dag = session.get(Dag, args.dag_id)
                assert dag is not None
                move_to_latest(session, run, dag, now)
            if map_index is not None and args.task_ids[0] not in groups_of(dag):
                cli.get_ti(session, args.dag_id, args.run_id, args.task_ids[0], map_index)
            cleared = clear_task_instances(
                session,
                run,
                dag,
                args.task_ids,
                downstream=args.downstream,
                now=now,
                map_index=map_index,
            )
        except (UnknownTask, NotVersioned) as exc:
            raise CliError(str(exc)) from None
    revoke_external_tasks(cli.settings, cleared.external_ids)
    wake_schedulers(cli.settings)
    print(f"cleared {cleared.count} task instance(s) of {args.dag_id} {args.run_id}")
    return 0


def note(cli: Cli, args: argparse.Namespace) -> int:
    """`sluice tasks note DAG_ID RUN_ID TASK_ID TEXT`: the TI's note, with who and when."""
    with transaction(cli.factory) as session:
        run, _ = cli.get_ti(session, args.dag_id, args.run_id, args.task_id)
        operations.note_on(session, run, args.task_id, args.text, who=cli_user(), now=utcnow())
    print(f"noted on {args.dag_id} {args.run_id} {args.task_id}")
    return 0


def mark(cli: Cli, args: argparse.Namespace) -> int:
    """`sluice tasks mark DAG_ID RUN_ID TASK_ID --state S [--downstream] [--upstream]`:
    one transaction marks the TIs (`scheduling.marking`); then the tries it took are
    stopped and the schedulers woken with the run's news."""
    state = TI(args.state)
    operations.ready_to_wake(cli.settings)
    with transaction(cli.factory) as session:
        run, _ = cli.get_ti(session, args.dag_id, args.run_id, args.task_id)
        dag = session.get(Dag, args.dag_id)
        assert dag is not None
        done = operations.mark_tasks(
            session,
            run,
            dag,
            args.task_id,
            state,
            upstream=args.upstream,
            downstream=args.downstream,
            who=cli_user(),
            now=utcnow(),
        )
    operations.after_mark(cli.settings, run, done)
    print(
        f"marked {len(done.task_ids)} task instance(s) of {args.dag_id} {args.run_id} "
        f"{state}: {', '.join(done.task_ids)}"
    )
    return 0
