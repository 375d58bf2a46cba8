"""`sluice dags …`: list, runs, trigger, versions, cancel, mark, note, state, pause,
unpause."""

from __future__ import annotations

import argparse
import datetime as dt
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.text import Text
from sqlalchemy import select

from sluice.scheduler.cli.context import Cli, CliError, iso
from sluice.scheduler.cli.render import cell, visible
from sluice.scheduler.cli.runs_cmd import add_runs_parser
from sluice.scheduler.cli.tables import Col, console, print_table
from sluice.scheduler.cli.timefmt import TIMES_NOTE, when
from sluice.scheduler.cli.watch_state import add_watch_state_parser
from sluice.scheduler.control import operations
from sluice.scheduler.control.inputs import check_id_text, parse_conf, parse_date
from sluice.scheduler.control.operations import trigger_run
from sluice.scheduler.core.db import transaction, utcnow
from sluice.scheduler.core.models import Dag, DagFile
from sluice.scheduler.core.queries.audit import cli_user
from sluice.scheduler.core.queries.versions import dag_versions
from sluice.scheduler.core.queries.watches import watch_errors
from sluice.scheduler.core.states import DagRunState
from sluice.scheduler.scheduling.bundle_sync import UnknownVersion, dag_at_version
from sluice.scheduler.scheduling.dagrun import RunExists, check_run_id
from sluice.scheduler.scheduling.marking import RUN_MARKS


def add_parsers(sub: argparse._SubParsersAction) -> None:
    dags = sub.add_parser("dags", help="list and trigger DAGs")
    cmds = dags.add_subparsers(dest="dags_cmd", required=True)
    p = cmds.add_parser("list", help="DAGs in the DAGs folder, and files that failed")
    p.add_argument("--json", action="store_true", help="print the DAGs as one JSON document")
    p.set_defaults(func=list_dags)
    add_runs_parser(cmds)
    add_watch_state_parser(cmds)
    p = cmds.add_parser("trigger", help="create a manual run")
    p.add_argument("dag_id")
    p.add_argument("--run-id", help="the new run's id (default: manual__ and its logical date)")
    p.add_argument(
        "--logical-date",
        help="the run's logical date, ISO 8601; no offset means UTC (default: now)",
    )
    p.add_argument("--conf", help="the run's conf, a JSON object")
    p.add_argument(
        "--version",
        metavar="SHA",
        help="run the DAG as of this commit of its git bundle (a sha, a tag or a branch)",
    )
    p.set_defaults(func=trigger)
    p = cmds.add_parser("versions", help="the versions of a git bundle's DAG")
    p.add_argument("dag_id")
    p.add_argument("--json", action="store_true", help="print the versions as JSON")
    p.set_defaults(func=versions)
    p = cmds.add_parser("cancel", help="stop a run: its unfinished tasks end, the run fails")
    p.add_argument("dag_id")
    p.add_argument("run_id")
    p.set_defaults(func=cancel)

    p = cmds.add_parser("mark", help="mark a run success or failed, with its tasks")
    p.add_argument("dag_id")
    p.add_argument("run_id")
    p.add_argument(
        "--state",
        required=True,
        choices=[str(s) for s in RUN_MARKS],
        help="the state the run and its unfinished tasks get",
    )
    p.set_defaults(func=mark)

    p = cmds.add_parser("note", help="set the note of a run (one line, who and when kept)")
    p.add_argument("dag_id")
    p.add_argument("run_id")
    p.add_argument("text")
    p.set_defaults(func=note)

    p = cmds.add_parser("state", help="print the state of a run")
    p.add_argument("dag_id")
    p.add_argument("run_id")
    p.set_defaults(func=state)
    for name, paused in (("pause", True), ("unpause", False)):
        p = cmds.add_parser(name, help=f"{name} a DAG's schedule")
        p.add_argument("dag_id")
        p.set_defaults(func=set_paused, paused=paused)


def list_dags(cli: Cli, args: argparse.Namespace) -> int:
    cli.sync_dags()
    with cli.factory() as session:
        dags = session.scalars(
            select(Dag).where(Dag.is_active.is_(True)).order_by(Dag.dag_id)
        ).all()
        broken = session.scalars(
            select(DagFile).where(DagFile.import_error.is_not(None)).order_by(DagFile.fileloc)
        ).all()
        failing = watch_errors(session)
    rows: list[dict[str, Any]] = [
        {
            "dag_id": d.dag_id,
            "fileloc": d.fileloc,
            "schedule": d.schedule,
            "is_paused": d.is_paused,
            "next_dagrun": iso(d.next_dagrun),
            "next_dagrun_create_after": iso(d.next_dagrun_create_after),
            "tasks": len(d.serialized["tasks"]),
            "import_error": None,
            "watch_error": failing.get(d.dag_id),
        }
        for d in dags
    ] + [{"dag_id": None, "fileloc": f.fileloc, "import_error": f.import_error} for f in broken]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print_dags(dags, broken, cli.settings.dags_folder, utcnow(), failing)
    return 0


DAG_COLUMNS = (
    Col("dag_id"),
    Col("file"),
    Col("schedule"),
    Col("next run at", keep=True),
    Col("logical date", keep=True),
)


def in_folder(fileloc: str, folder: Path) -> str:
    """`fileloc` relative to the DAGs folder (as it is when outside it)."""
    for base in (folder.resolve(), folder.absolute()):
        try:
            return str(Path(fileloc).relative_to(base))
        except ValueError:
            continue
    return fileloc


def print_dags(
    dags: Sequence[Dag],
    broken: Sequence[DagFile],
    folder: Path,
    now: dt.datetime,
    failing: dict[str, str] | None = None,
) -> None:
    """The DAG table: files relative to the folder, the schedule (and whether it is
    paused), when the next scheduled run is created and its logical date (the start of
    the interval it covers); each file that failed to import is a row, its error a line
    of its own under the table."""
    rows: list[tuple[Any, ...]] = [
        (
            d.dag_id,
            in_folder(d.fileloc, folder),
            (d.schedule or "manual") + (", paused" if d.is_paused else ""),
            when(d.next_dagrun_create_after, now),
            when(d.next_dagrun, now),
        )
        for d in dags
    ]
    failed = Text("import failed", style="red")
    rows += [(failed, in_folder(f.fileloc, folder), "", "", "") for f in broken]
    notes: list[Text | str] = [TIMES_NOTE] if any(d.next_dagrun for d in dags) else []
    for f in broken:
        line = Text(f"{visible(in_folder(f.fileloc, folder))}: ", style="red")
        line.append_text(cell(f.import_error))
        notes.append(line)
    for dag_id, error in sorted((failing or {}).items()):
        line = Text(f"{visible(dag_id)}: watch failed: ", style="red")
        line.append_text(cell(error))
        notes.append(line)
    empty = f"no DAGs in {visible(str(folder))}"
    print_table(console(), DAG_COLUMNS, rows, notes=notes, empty=empty)


def trigger(cli: Cli, args: argparse.Namespace) -> int:
    conf = parse_conf(
        args.conf, max_bytes=cli.settings.max_conf_bytes, max_depth=cli.settings.max_conf_depth
    )
    now = utcnow()
    logical = parse_date(args.logical_date, "--logical-date") if args.logical_date else now
    if args.run_id is not None:
        try:
            check_run_id(check_id_text(args.run_id))
        except ValueError as exc:
            raise CliError(f"--run-id {exc}") from None
    cli.sync_dags()
    operations.ready_to_wake(cli.settings)
    with transaction(cli.factory) as session:
        dag = cli.get_dag(session, args.dag_id)
        if args.version is not None:
            try:
                dag = dag_at_version(cli.factory, cli.settings, dag, args.version, now=now)
            except UnknownVersion as exc:
                raise CliError(str(exc)) from None
        try:
            run = trigger_run(
                session, dag, now=now, logical_date=logical, run_id=args.run_id, conf=conf
            )
        except RunExists as exc:
            raise CliError(str(exc)) from None
    operations.wake_schedulers(cli.settings)
    print(run.run_id)
    return 0


VERSION_COLUMNS = (
    Col("version", keep=True),
    Col("date", keep=True),
    Col("author"),
    Col("runs", right=True),
    Col("subject"),
)


def versions(cli: Cli, args: argparse.Namespace) -> int:
    """`sluice dags versions DAG_ID`: the DAG's versions, newest first."""
    cli.sync_dags()
    with cli.factory() as session:
        cli.get_dag(session, args.dag_id)
        found = dag_versions(session, args.dag_id)
    if args.json:
        shown = [dict(v, committed_at=iso(v["committed_at"])) for v in found]
        print(json.dumps(shown, indent=2))
        return 0
    now = utcnow()
    rows = [
        (v["commit_sha"][:12], when(v["committed_at"], now), v["author"], v["runs"], v["subject"])
        for v in found
    ]
    empty = f"no versions of {args.dag_id}: only a git bundle's DAGs have versions"
    print_table(console(), VERSION_COLUMNS, rows, empty=empty)
    return 0


def state(cli: Cli, args: argparse.Namespace) -> int:
    with cli.factory() as session:
        run = cli.get_run(session, args.dag_id, args.run_id)
        print(run.state)
    return 0


def set_paused(cli: Cli, args: argparse.Namespace) -> int:
    cli.sync_dags()
    with transaction(cli.factory) as session:
        dag = cli.get_dag(session, args.dag_id)
        dag.is_paused = args.paused
    print(f"{args.dag_id} {'paused' if args.paused else 'unpaused'}")
    return 0


def cancel(cli: Cli, args: argparse.Namespace) -> int:
    """`sluice dags cancel DAG_ID RUN_ID`: one transaction ends the run and its TIs, then
    the tries that were queued or running are stopped (`control.operations`)."""
    with transaction(cli.factory) as session:
        run = cli.get_run(session, args.dag_id, args.run_id)
        done = operations.cancel_run(session, run, who=cli_user(), now=utcnow())
    operations.stop_tries(cli.settings, done)
    print(
        f"cancelled {args.dag_id} {args.run_id}: the run failed, "
        f"{len(done.attempts)} queued or running tries stopped"
    )
    return 0


def note(cli: Cli, args: argparse.Namespace) -> int:
    """`sluice dags note DAG_ID RUN_ID TEXT`: the run's note, kept with who and when."""
    with transaction(cli.factory) as session:
        run = cli.get_run(session, args.dag_id, args.run_id)
        operations.note_on(session, run, None, args.text, who=cli_user(), now=utcnow())
    print(f"noted on {args.dag_id} {args.run_id}")
    return 0


def mark(cli: Cli, args: argparse.Namespace) -> int:
    """`sluice dags mark DAG_ID RUN_ID --state success|failed`: one transaction marks the
    run and its TIs (`scheduling.marking`); then the tries it took are stopped."""
    state = DagRunState(args.state)
    operations.ready_to_wake(cli.settings)
    with transaction(cli.factory) as session:
        run = cli.get_run(session, args.dag_id, args.run_id)
        done = operations.mark_a_run(session, run, state, who=cli_user(), now=utcnow())
    operations.after_mark(cli.settings, run, done)
    print(
        f"marked {args.dag_id} {args.run_id} {state}: {len(done.task_ids)} task instance(s) "
        f"marked with it, {len(done.attempts)} queued or running tries stopped"
    )
    return 0
