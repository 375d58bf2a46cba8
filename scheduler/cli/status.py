"""`sluice status [--json]`: one screen on how the system is doing.

Live jobs with their heartbeat age, runs by state, TIs by queue and state, and the
workers seen per queue (asked through the broker's remote control; not on the SQLite
database of `sluice standalone`, whose broker lives in its process). Reads only: one
short read session, then the workers are asked outside any transaction.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.text import Text
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from sluice.scheduler.cli import tables
from sluice.scheduler.cli.context import Cli, iso
from sluice.scheduler.cli.render import visible
from sluice.scheduler.cli.tables import Col, print_table
from sluice.scheduler.cli.timefmt import TIMES_NOTE, when
from sluice.scheduler.control.inputs import check_seconds
from sluice.scheduler.core.db import utcnow
from sluice.scheduler.core.models import BundleState, DagRun, Job, TaskInstance, Trigger
from sluice.scheduler.core.queries.callbacks import counts as callback_counts
from sluice.scheduler.core.settings import Settings
from sluice.scheduler.core.states import DagRunState, JobState, TaskInstanceState


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("status", help="jobs, runs, task instances and workers at a glance")
    p.add_argument("--json", action="store_true", help="print the status as one JSON document")
    p.add_argument(
        "--workers-timeout",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="how long to wait for workers to answer (0: do not ask)",
    )
    p.set_defaults(func=status)


def read_status(session: Session, settings: Settings, now: dt.datetime) -> dict[str, Any]:
    """Jobs still marked running, runs by state, TIs by queue and state, callbacks by
    status (plain SELECTs)."""
    jobs = session.scalars(
        select(Job).where(Job.state == JobState.RUNNING).order_by(Job.job_type, Job.id)
    ).all()
    runs = dict.fromkeys((str(s) for s in DagRunState), 0)
    for state, n in session.execute(select(DagRun.state, func.count()).group_by(DagRun.state)):
        runs[str(state)] = int(n)
    tis: dict[str, dict[str, int]] = {}
    rows = session.execute(
        select(TaskInstance.queue, TaskInstance.state, func.count()).group_by(
            TaskInstance.queue, TaskInstance.state
        )
    )
    for queue, ti_state, n in rows:
        tis.setdefault(queue, {})[str(ti_state)] = int(n)
    held = {
        job_id: int(n)
        for job_id, n in session.execute(
            select(Trigger.triggerer_id, func.count())
            .where(Trigger.lease_until > now)
            .group_by(Trigger.triggerer_id)
        )
    }
    return {
        "now": iso(now),
        "triggerers": [
            {
                "id": job.id,
                "hostname": job.hostname,
                "pid": job.pid,
                "triggers": held.get(job.id, 0),
                "capacity": job.capacity,
                "heartbeat_age_seconds": round((now - job.latest_heartbeat).total_seconds(), 3),
            }
            for job in jobs
            if job.job_type == "triggerer"
        ],
        "jobs": [
            {
                "id": job.id,
                "job_type": job.job_type,
                "hostname": job.hostname,
                "pid": job.pid,
                "start_date": iso(job.start_date),
                "latest_heartbeat": iso(job.latest_heartbeat),
                "heartbeat_age_seconds": round((now - job.latest_heartbeat).total_seconds(), 3),
                "alive": (now - job.latest_heartbeat).total_seconds() <= settings.heartbeat_timeout,
            }
            for job in jobs
        ],
        "runs": runs,
        "task_instances": {q: tis[q] for q in sorted(tis)},
        "callbacks": callback_counts(session),
        "bundles": [
            {
                "name": b.name,
                "commit": b.head_commit,
                "fetched_at": iso(b.fetched_at),
                "failing_since": iso(b.failing_since),
                "error": b.error,
            }
            for b in session.scalars(select(BundleState).order_by(BundleState.name))
        ],
    }


def status(cli: Cli, args: argparse.Namespace) -> int:
    check_seconds(args.workers_timeout, "--workers-timeout")
    with cli.factory() as session:
        report = read_status(session, cli.settings, utcnow())
    notes: list[str] = []
    workers: dict[str, list[str]] | None = None
    from sluice.scheduler.control.workers import STANDALONE_NOTE, standalone_database

    if standalone_database(cli.settings):
        notes.append(STANDALONE_NOTE)
    elif args.workers_timeout > 0:
        from sluice.scheduler.control.workers import workers_by_queue

        found = workers_by_queue(cli.settings, timeout=args.workers_timeout)
        workers = {q: found[q] for q in sorted(found)}
        if found.note:
            notes.append(found.note)
    else:
        notes.append("the workers were not asked")
    report["workers"] = workers
    report["notes"] = notes
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_status(report, cli.settings)
    return 0


def print_status(
    report: dict[str, Any], settings: Settings, console: Console | None = None
) -> None:
    """The report as tables fitted to the terminal (`tables.print_table`): states and
    counts never cut, hosts and queues wrapped when the terminal is narrow."""
    out = console or tables.console()
    now = dt.datetime.fromisoformat(report["now"])
    jobs = []
    stale: list[Text | str] = []
    for job in report["jobs"]:
        age = Text(f"{job['heartbeat_age_seconds']:.1f}s ago")
        if not job["alive"]:
            age.stylize("red")
            stale.append(
                Text(
                    visible(
                        f"job {job['id']} ({job['job_type']} on {job['hostname']}) is stale: "
                        f"no heartbeat for over {settings.heartbeat_timeout:g}s"
                    ),
                    style="red",
                )
            )
        started = when(dt.datetime.fromisoformat(job["start_date"]), now)
        jobs.append((job["id"], job["job_type"], job["hostname"], job["pid"], started, age))
    out.print("[bold]Live jobs[/]")
    if report["jobs"]:
        print_table(out, JOB_COLUMNS, jobs, notes=[TIMES_NOTE, *stale])
    else:
        out.print("[red]no scheduler or backfill is running[/]")

    for triggerer in report["triggerers"]:
        out.print(visible(triggerer_line(triggerer)))

    out.print("[bold]Runs by state[/]")
    run_cols = [Col(visible(str(state)), keep=True, right=True) for state in report["runs"]]
    print_table(out, run_cols, [list(report["runs"].values())])

    order = {str(s): n for n, s in enumerate(TaskInstanceState)}
    tis = [
        (queue, state, n)
        for queue, by_state in report["task_instances"].items()
        for state, n in sorted(by_state.items(), key=lambda item: order.get(item[0], 99))
    ]
    out.print("[bold]Task instances by queue and state[/]")
    print_table(out, TI_COLUMNS, tis, empty="no task instances")

    out.print("[bold]Callbacks by status[/]")
    callback_cols = [
        Col(visible(str(status)), keep=True, right=True) for status in report["callbacks"]
    ]
    print_table(out, callback_cols, [list(report["callbacks"].values())])

    print_bundles(out, report["bundles"], now)

    workers = report["workers"]
    rows: list[tuple[Any, ...]] = []
    if workers is not None:
        for queue in sorted(set(workers) | set(report["task_instances"])):
            names = workers.get(queue) or []
            rows.append((queue, ", ".join(names) if names else Text("none", style="red")))
    out.print("[bold]Workers per queue[/]" + ("" if workers is not None else " (not asked)"))
    if workers is not None:
        print_table(out, WORKER_COLUMNS, rows, empty="no queue has task instances or workers")
    for note in report["notes"]:
        out.print(f"[dim]note: {escape(visible(note))}[/]")


def triggerer_line(triggerer: dict[str, Any]) -> str:
    """`triggerer host:pid n/capacity triggers, heartbeat 0.4s ago`."""
    return (
        f"triggerer {triggerer['hostname']}:{triggerer['pid']} "
        f"{triggerer['triggers']}/{triggerer['capacity']} triggers, "
        f"heartbeat {triggerer['heartbeat_age_seconds']:.1f}s ago"
    )


def print_bundles(out: Console, bundles: list[dict[str, Any]], now: dt.datetime) -> None:
    """The git bundles (none: nothing printed): the commit parsed last, when the last
    fetch worked, and, in red under the table, each bundle whose fetch fails since when."""
    if not bundles:
        return
    rows: list[tuple[Any, ...]] = []
    failing: list[Text | str] = []
    for bundle in bundles:
        fetched = bundle["fetched_at"]
        rows.append(
            (
                bundle["name"],
                (bundle["commit"] or "")[:12] or "none yet",
                when(dt.datetime.fromisoformat(fetched), now) if fetched else "never",
                Text("failing", style="red") if bundle["failing_since"] else "ok",
            )
        )
        if bundle["failing_since"]:
            since = when(dt.datetime.fromisoformat(bundle["failing_since"]), now)
            failing.append(
                Text(
                    visible(
                        f"bundle {bundle['name']}: fetching fails since {since} "
                        f"({bundle['error']}); the schedulers keep commit "
                        f"{(bundle['commit'] or 'none')[:12]}"
                    ),
                    style="red",
                )
            )
    out.print("[bold]DAG bundles[/]")
    print_table(out, BUNDLE_COLUMNS, rows, notes=[TIMES_NOTE, *failing])


BUNDLE_COLUMNS = (
    Col("bundle"),
    Col("commit", keep=True),
    Col("last fetch", keep=True),
    Col("fetch", keep=True),
)
JOB_COLUMNS = (
    Col("id", keep=True, right=True),
    Col("type", keep=True),
    Col("host"),
    Col("pid", keep=True, right=True),
    Col("started", keep=True),
    Col("last heartbeat", keep=True),
)
TI_COLUMNS = (Col("queue"), Col("state", keep=True), Col("task instances", keep=True, right=True))
WORKER_COLUMNS = (Col("queue"), Col("workers"))
