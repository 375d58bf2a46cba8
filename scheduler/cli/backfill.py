"""`sluice backfill DAG_ID --start --end`: backfill runs, driven beside the schedulers.

Synchronous: shows progress, exits 0 only if every run it drove succeeded.
With `--local` the tasks run in this process, from the DAG files as they are
in the local folder, with no hand-off to workers. More than `--confirm-above` runs
(1,000) are created only after a yes at the prompt, or with `--yes`.
`sluice backfill cancel DAG_ID`, a subcommand of its own, ends the DAG's unfinished
backfill runs `failed` and stops their running tries; the DAG form is backfill's default
subcommand (`parser.CommandParser.with_default`).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from sluice.scheduler.cli.context import Cli, CliError
from sluice.scheduler.cli.services import install_stop_handlers
from sluice.scheduler.control.inputs import parse_date
from sluice.scheduler.core.models import Dag
from sluice.scheduler.scheduling.timetables import logical_dates_between

log = logging.getLogger(__name__)


DAG_FORM = "<DAG_ID>"
"""The name of backfill's default subcommand, `sluice backfill DAG_ID ...`: never typed
(the arguments are its own unless they start with `cancel`), and no DAG id."""


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "backfill",
        help="run a DAG for a range of past dates (`backfill cancel DAG_ID` to stop one)",
    )
    forms = p.add_subparsers(dest="backfill", required=True)
    add_dag_form(forms)
    cancelling = forms.add_parser(
        "cancel",
        help="end a DAG's unfinished backfill runs failed, stopping their tries",
        description="End the DAG's unfinished backfill runs failed and stop their tries.",
    )
    cancelling.add_argument("dag_id", metavar="DAG_ID", help="the DAG")
    cancelling.set_defaults(func=cancel_command)
    p.with_default(DAG_FORM, forms)


def add_dag_form(forms: argparse._SubParsersAction) -> None:
    """`sluice backfill DAG_ID --start ISO --end ISO [...]`, backfill's default form."""
    p = forms.add_parser(
        DAG_FORM,
        prog="sluice backfill",
        description="Run DAG_ID for every logical date of its schedule from --start to --end.",
        epilog="sluice backfill cancel DAG_ID ends the DAG's unfinished backfill runs failed, "
        "stopping their tries.",
    )
    p.add_argument("dag_id", metavar="DAG_ID", help="the DAG")
    p.add_argument("--start", help="first logical date (ISO 8601)")
    p.add_argument("--end", help="last logical date (ISO 8601), included")
    p.add_argument(
        "--yes",
        action="store_true",
        help="create more runs than SLUICE_BACKFILL_CONFIRM_RUNS (1000) without asking",
    )
    p.add_argument("--rerun-failed", action="store_true", help="rerun dates whose run failed")
    p.add_argument(
        "--max-active-runs",
        type=int,
        default=None,
        help="the backfill's runs active at once (default: the DAG's max_active_runs)",
    )
    p.add_argument(
        "--version",
        metavar="SHA",
        help="the runs' commit of the DAG's git bundle (a sha, a tag or a branch)",
    )
    p.add_argument("--local", action="store_true", help="run tasks in this process")
    p.add_argument("-c", "--concurrency", type=int, default=4, help="tasks at once with --local")
    p.set_defaults(func=backfill)


def find_local_dag(folder: Path, dag_id: str) -> Any:
    """The DAG object `dag_id` loaded in-process from the local DAG files."""
    from sluice.tasks.loader import list_dag_files, load_file
    from sluice.tasks.parsing import describe_error

    for path in list_dag_files(folder):
        if dag_id not in path.read_text(errors="replace"):
            continue
        try:
            dags = load_file(path)
        except Exception as exc:
            shown = path.relative_to(folder) if path.is_relative_to(folder) else path
            raise CliError(f"{shown} does not load: {describe_error(exc, str(path))}") from None
        for dag in dags:
            if dag.dag_id == dag_id:
                return dag
    raise CliError(f"unknown DAG {dag_id!r} (not in {folder})")


def transient_dag(local: Any, stored: Dag) -> Dag:
    """A Dag row (never added to a session) holding the local definition."""
    from sluice.tasks.serialize import serialize_dag, version_hash

    spec = serialize_dag(local)
    return Dag(
        dag_id=stored.dag_id,
        fileloc=str(local.fileloc),
        is_paused=stored.is_paused,
        is_active=True,
        version_hash=version_hash(spec),
        serialized=spec,
        max_active_runs=spec["max_active_runs"],
        max_active_tasks=spec["max_active_tasks"],
    )


def backfill(cli: Cli, args: argparse.Namespace) -> int:
    from sluice.broker.wakeup import LocalWaker, waker_for
    from sluice.scheduler.jobs.backfill_job import BackfillJob

    if args.start is None or args.end is None:
        raise CliError("backfill needs --start and --end")
    start = parse_date(args.start, "--start")
    end = parse_date(args.end, "--end")
    if end < start:
        raise CliError(f"--end {args.end} is before --start {args.start}")
    if args.max_active_runs is not None and args.max_active_runs < 1:
        raise CliError("--max-active-runs must be at least 1")
    if args.version is not None and args.local:
        raise CliError("--local runs the DAG files of this folder: it takes no --version")
    if args.local:  # the tasks run in this process: the secrets leave its environment
        from sluice.broker.worker.task_env import hide_secrets

        hide_secrets(cli.settings)
    local_obj = find_local_dag(cli.dags_folder(), args.dag_id) if args.local else None
    if not args.local:
        cli.sync_dags()
    with cli.factory() as session:
        stored = session.get(Dag, args.dag_id)
        if stored is None and args.local:
            cli.sync_dags()
            stored = session.get(Dag, args.dag_id)
        if stored is None or not stored.is_active:
            raise cli.unknown_dag(session, args.dag_id)
    local = transient_dag(local_obj, stored) if local_obj is not None else None
    if args.version is not None:  # every run of the backfill keeps that commit
        from sluice.scheduler.core.db import utcnow
        from sluice.scheduler.scheduling.bundle_sync import UnknownVersion, dag_at_version

        try:
            local = dag_at_version(cli.factory, cli.settings, stored, args.version, now=utcnow())
        except UnknownVersion as exc:
            raise CliError(str(exc)) from None
    spec = (local or stored).serialized
    try:
        dates = logical_dates_between(spec, start, end)
    except ValueError as exc:
        raise CliError(f"cannot backfill {args.dag_id!r}: {exc}") from None
    if not dates:
        raise CliError(f"no logical date of {args.dag_id!r}'s schedule between {start} and {end}")
    if (
        len(dates) > cli.settings.backfill_confirm_runs
        and not args.yes
        and not confirmed(len(dates), args.dag_id)
    ):
        raise CliError(
            f"a backfill of {len(dates):,} runs of {args.dag_id!r} (over "
            f"SLUICE_BACKFILL_CONFIRM_RUNS={cli.settings.backfill_confirm_runs}): pass --yes "
            "to create them"
        )

    from sluice.scheduler.core.tracing import Tracing

    tracing = Tracing("sluice-backfill")
    if args.local:
        tracing.install_global()  # task code runs here: its spans nest under the TI spans
    executor: ThreadPoolExecutor | None = None
    if args.local:
        waker: Any = LocalWaker()
        executor = ThreadPoolExecutor(max_workers=args.concurrency)
        publish = local_publisher(cli, executor, local_obj, local, waker)
    else:
        from sluice.broker.app import create_app
        from sluice.broker.publisher import publish as publish_to
        from sluice.scheduler.core.deployment import HEADER, deployment_id

        app = create_app(cli.settings)
        app.conf[HEADER] = deployment_id(cli.factory)  # its messages say whose they are
        waker = waker_for(cli.settings)

        def publish(messages: Any) -> None:
            publish_to(app, messages)

    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[detail]}"),
        transient=False,
        disable=not sys.stderr.isatty(),
    ) as bar:
        runs_bar = bar.add_task("runs", total=len(dates), detail="")
        tasks_bar = bar.add_task("tasks", total=None, detail="")

        def on_progress(p: Any) -> None:
            bar.update(runs_bar, completed=p.runs_done, total=max(p.runs_total, 1))
            detail = " ".join(f"{k}={v}" for k, v in sorted(p.states.items()))
            bar.update(tasks_bar, completed=p.tasks_done, total=p.tasks_total, detail=detail)

        job = BackfillJob(
            cli.settings,
            cli.factory,
            publish,
            waker,
            dag_id=args.dag_id,
            dates=dates,
            rerun_failed=args.rerun_failed,
            max_active_runs=args.max_active_runs,
            local_dag=local,
            on_progress=on_progress,
            tracing=tracing,
        )
        install_stop_handlers(job)
        job.prepare()
        try:
            job.run()
        finally:
            if executor is not None:
                executor.shutdown(wait=True, cancel_futures=True)
            waker.close()
    if job.lost:
        raise CliError(str(job.lost))
    outcome = job.outcome()
    for date in job.skipped_dates:
        print(f"skipped {date.isoformat()}: a run already exists")
    print_driven_runs(cli, job.run_pks)
    if job.stopping and not job.done():
        print("interrupted: unfinished runs were released to the schedulers", file=sys.stderr)
        return 130
    return 0 if all(s == "success" for s in outcome.values()) else 1


def print_driven_runs(cli: Cli, run_pks: Any) -> None:
    """The runs this backfill drove, by logical date, as `sluice dags runs` shows runs."""
    from sqlalchemy import select

    from sluice.scheduler.cli.runs_cmd import print_runs
    from sluice.scheduler.core.db import utcnow
    from sluice.scheduler.core.models import DagRun

    if not run_pks:
        return
    with cli.factory() as session:
        runs = session.scalars(
            select(DagRun).where(DagRun.id.in_(list(run_pks))).order_by(DagRun.logical_date)
        ).all()
    print_runs(runs, utcnow(), empty="no runs")


def confirmed(runs: int, dag_id: str) -> bool:
    """Asked at a terminal: whether the user wants `runs` runs (never without one)."""
    if not sys.stdin.isatty():
        return False
    answer = input(f"create {runs:,} backfill runs of {dag_id!r}? [y/N] ")
    return answer.strip().lower() in ("y", "yes")


def cancel_command(cli: Cli, args: argparse.Namespace) -> int:
    return cancel(cli, args.dag_id)


def cancel(cli: Cli, dag_id: str) -> int:
    """End the unfinished backfill runs of `dag_id` failed and stop their tries."""
    from sqlalchemy import select

    from sluice.scheduler.control.operations import stop_tries
    from sluice.scheduler.core.db import transaction, utcnow
    from sluice.scheduler.core.models import DagRun
    from sluice.scheduler.core.states import RUN_UNFINISHED, RunType
    from sluice.scheduler.scheduling.cancelling import cancel_runs

    with transaction(cli.factory) as session:
        cli.get_dag(session, dag_id)
        run_pks = session.scalars(
            select(DagRun.id).where(
                DagRun.dag_id == dag_id,
                DagRun.run_type == RunType.BACKFILL,
                DagRun.state.in_(list(RUN_UNFINISHED)),
            )
        ).all()
        done = cancel_runs(session, run_pks, utcnow())
    stop_tries(cli.settings, done)  # after the commit: a late result changes nothing
    print(f"cancelled {done.runs} backfill run(s) of {dag_id}; {len(done.attempts)} tries stopped")
    return 0


def local_publisher(
    cli: Cli, executor: ThreadPoolExecutor, local_obj: Any, local: Any, waker: Any
) -> Any:
    """Run each queued TI in this process's thread pool instead of sending it."""
    import socket

    from sluice.broker.worker.context import WorkerContext
    from sluice.broker.worker.runner import run_task_instance

    class LocalDags:
        def get_dag(self, fileloc: str, dag_id: str) -> Any:
            return local_obj

        def get_spec(self, dag_id: str) -> dict[str, Any]:
            return dict(local.serialized)

    ctx = WorkerContext(
        session_factory=cli.factory,
        dags=LocalDags(),
        waker=waker,
        settings=cli.settings,
        hostname=socket.gethostname(),
        pid=os.getpid(),
    )

    from sluice.broker.worker.tracing import run_span

    def run_one(message: Any) -> None:
        try:
            with run_span(message):
                run_task_instance(ctx, message)
        except Exception:
            log.exception("running %s locally failed", message.task_id)

    def publish(messages: Any) -> None:
        for message in messages:
            executor.submit(run_one, message)

    return publish
