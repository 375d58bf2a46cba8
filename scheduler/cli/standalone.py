"""`sluice standalone`: SQLite, an embedded broker, a scheduler, a worker and a triggerer in
one process.

It needs no server: the broker is kombu's in-memory transport and the worker
runs on a thread pool inside this process. `SLUICE_BROKER_URL` is ignored.

- With `--trigger DAG_ID` it runs one manual run of the DAG to its end and nothing else
  (`OneRunJob`, as `airflow dags test`: no scheduled run is created), prints the run's
  task states and exits 0 if it succeeded, 1 if it failed, 130 if stopped before.
- Without, it schedules every DAG until Ctrl-C, after saying (on stderr) how to trigger
  a run from another terminal.
- Either way it first takes up what a standalone that died left (`StandaloneJob`).
- Before that, it refuses a database another process has a live heartbeat in, or one it
  did not create whose schema is not current (`standalone_database`).
- It prints a line for each try that ends (`task_lines`); the INFO lines of its
  scheduler, its worker and Celery only with `-v`.

Stdout carries only the result (the table or, with `--json`, one JSON document):
the tasks' output, the logs and the status lines go to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import threading
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.orm import Session

from sluice.scheduler.cli.context import Cli, CliError, iso
from sluice.scheduler.cli.render import visible
from sluice.scheduler.cli.standalone_database import take_database
from sluice.scheduler.cli.standalone_hint import how_to_trigger
from sluice.scheduler.cli.streams import stdout_to_stderr
from sluice.scheduler.cli.task_lines import TaskLines
from sluice.scheduler.cli.tasks_cmd import print_states, ti_rows
from sluice.scheduler.control.inputs import check_int
from sluice.scheduler.core.db import reader_factory, transaction, utcnow
from sluice.scheduler.core.models import Dag, DagRun
from sluice.scheduler.core.states import RUN_TERMINAL, DagRunState, RunType
from sluice.scheduler.scheduling.dagrun import create_dagrun
from sluice.tasks.params import ParamsError

log = logging.getLogger(__name__)

STOPPED = 130
"""Exit code of `--trigger` stopped (Ctrl-C, SIGTERM) before its run ended."""
MAX_CONCURRENCY = 1024


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "standalone",
        help="SQLite + embedded broker + scheduler + worker in one process",
        description="Run a scheduler and a worker in this process, on SQLite by default. "
        "Without --trigger: until Ctrl-C. With --trigger: one run to its end.",
    )
    p.add_argument(
        "--trigger",
        metavar="DAG_ID",
        help="run one manual run of DAG_ID to its end and nothing else (no scheduled "
        "runs), print its task states, exit 0 if it succeeded, 1 if it failed",
    )
    p.add_argument("--conf", metavar="JSON", help="the --trigger run's conf, a JSON object")
    p.add_argument(
        "-c",
        "--concurrency",
        type=int,
        default=4,
        help="tasks run at once by the embedded worker (threads; default 4)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="with --trigger: the run and its task states as one JSON document on stdout "
        "(everything else goes to stderr)",
    )
    p.add_argument(
        "--database-url",
        metavar="URL",
        help="the database to use instead of SLUICE_DATABASE_URL (default "
        "sqlite:///sluice.db); refused if another process (a scheduler, a worker) has a "
        "live heartbeat there, or if its schema is not current and standalone did not "
        "create it",
    )
    p.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="also the INFO lines of its scheduler, its worker and Celery (received, "
        "succeeded, attempt ids, result paths); -vv: DEBUG. By default: one line per "
        "try that ends, the warnings and the errors",
    )
    p.set_defaults(func=standalone)


def all_queues(cli: Cli) -> list[str]:
    with cli.factory() as session:
        specs = session.scalars(select(Dag.serialized).where(Dag.is_active.is_(True))).all()
    queues = {"default", cli.settings.callback_queue}
    for spec in specs:
        queues.update(t.get("queue") or "default" for t in spec["tasks"].values())
    return sorted(queues)


def check_arguments(args: argparse.Namespace) -> None:
    """Refuse options that mean nothing without `--trigger`, and a bad `-c`, before
    anything is written."""
    if not args.trigger:
        for given, name in ((args.json, "--json"), (args.conf is not None, "--conf")):
            if given:
                raise CliError(f"{name} needs --trigger DAG_ID (it is about the triggered run)")
    check_int(args.concurrency, "-c/--concurrency", 1, MAX_CONCURRENCY)
    if args.database_url is not None:
        check_database_url(args.database_url)


def check_database_url(url: str) -> None:
    """A CliError unless `url` is a database URL SQLAlchemy can parse."""
    try:
        make_url(url)
    except ArgumentError:
        shown = visible(url if len(url) <= 100 else f"{url[:100]}...")
        raise CliError(f"--database-url is not a database URL: {shown!r}") from None


def standalone(cli: Cli, args: argparse.Namespace) -> int:
    from sluice.broker.publisher import publish, publish_callbacks
    from sluice.broker.wakeup import waker_for
    from sluice.broker.worker.embedded import EmbeddedBroker
    from sluice.broker.worker.tracing import instrument_celery
    from sluice.scheduler.cli.services import install_stop_handlers
    from sluice.scheduler.control.inputs import parse_conf
    from sluice.scheduler.core.tracing import Tracing
    from sluice.scheduler.jobs.standalone import OneRunJob, StandaloneJob
    from sluice.scheduler.jobs.triggerer import TriggererJob

    check_arguments(args)
    conf: dict[str, Any] = parse_conf(
        args.conf, max_bytes=cli.settings.max_conf_bytes, max_depth=cli.settings.max_conf_depth
    )
    cli.check_bundles()  # every argument is checked before the database is created
    database = {"database_url": args.database_url} if args.database_url else {}
    cli.settings = cli.settings.with_(embedded_broker=True, broker_url="memory://", **database)
    created = take_database(cli)  # a live deployment's, or one to migrate, is refused
    cli.sync_dags()
    try:
        run_pk, task_ids = trigger(cli, args.trigger, conf) if args.trigger else (None, [])
    except CliError:
        if created is not None:  # the DAG id is checked against a parse, after the
            forget_database(cli, created)  # database's creation: leave nothing written
        raise
    tracing = Tracing("sluice-standalone")
    instrument_celery(tracing)  # the worker runs in this process
    embedded = EmbeddedBroker(cli.settings)
    common: dict[str, Any] = {
        "tracing": tracing,
        "publish_callbacks": lambda messages: publish_callbacks(embedded.app, messages),
    }
    job_args = (
        cli.settings,
        cli.factory,
        lambda messages: publish(embedded.app, messages),
        waker_for(cli.settings),
    )
    job = (
        StandaloneJob(*job_args, **common)
        if run_pk is None
        else OneRunJob(*job_args, run_pk=run_pk, **common)
    )
    install_stop_handlers(job)
    triggerer = TriggererJob(cli.settings, cli.factory, job_args[3])  # deferred tasks' waits
    waiting = threading.Thread(target=triggerer.run, name="sluice-triggerer", daemon=True)
    lines = TaskLines(reader_factory(cli.factory), run_pk=run_pk, task_ids=task_ids)
    with stdout_to_stderr():  # what tasks print never mixes into the result
        embedded.start(all_queues(cli), args.concurrency)
        try:
            if run_pk is None:
                say_how_to_trigger(cli)
            lines.start()
            waiting.start()
            job.run()
        finally:
            triggerer.stopping = True
            waiting.join(timeout=10)
            embedded.stop()
            lines.stop()  # the last tries' lines, before the result
    return 0 if run_pk is None else report(cli, run_pk, as_json=args.json)


def trigger(cli: Cli, dag_id: str, conf: dict[str, Any]) -> tuple[int, list[str]]:
    """Create the `--trigger` run (queued, not claimed); its primary key and its DAG's
    task ids."""
    with transaction(cli.factory) as session:
        dag = cli.get_dag(session, dag_id)
        now = utcnow()
        try:
            run = create_dagrun(
                session, dag, run_type=RunType.MANUAL, logical_date=now, now=now, conf=conf
            )
        except ParamsError as exc:  # raised before anything was written
            raise CliError(str(exc)) from None
        run_pk, run_id = run.id, run.run_id
        task_ids = list(dag.serialized.get("tasks", {}))
    log.info("triggered %s %s", dag_id, run_id)
    return run_pk, task_ids


def forget_database(cli: Cli, path: str) -> None:
    """Remove the SQLite database this command created (with SQLite's side files)."""
    cli.engine.dispose()
    for name in (path, f"{path}-journal", f"{path}-wal", f"{path}-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(name)


def say_how_to_trigger(cli: Cli) -> None:
    with cli.factory() as session:
        dag_ids = list(
            session.scalars(select(Dag.dag_id).where(Dag.is_active.is_(True)).order_by(Dag.dag_id))
        )
    lines = how_to_trigger(cli.settings.database_url, cli.settings.dags_folder, dag_ids)
    print("\n".join(lines), file=sys.stderr, flush=True)


def run_document(session: Session, run: DagRun) -> dict[str, Any]:
    """The `--json` result: the run and its task instances (as `sluice tasks states
    --json` gives them)."""
    return {
        "dag_id": run.dag_id,
        "run_id": run.run_id,
        "run_type": run.run_type,
        "state": run.state,
        "logical_date": iso(run.logical_date),
        "start_date": iso(run.start_date),
        "end_date": iso(run.end_date),
        "tasks": ti_rows(session, run),
    }


def report(cli: Cli, run_pk: int, *, as_json: bool) -> int:
    """Print the run's result on stdout (its status line on stderr with `--json`); the
    exit code: 0 success, 1 failed, `STOPPED` unfinished."""
    with cli.factory() as session:
        run = session.get(DagRun, run_pk)
        assert run is not None
        document = run_document(session, run)
    status = f"run {visible(document['run_id'])}: {document['state']}"
    if as_json:
        print(json.dumps(document, indent=2))
        print(status, file=sys.stderr)
    else:
        print_states(document["tasks"], False)
        print(status)
    if document["state"] not in RUN_TERMINAL:
        print(
            f"sluice: stopped before the run ended; `sluice standalone` on the same "
            f"database takes it up ({visible(document['dag_id'])} {visible(document['run_id'])})",
            file=sys.stderr,
        )
        return STOPPED
    return 0 if document["state"] == DagRunState.SUCCESS else 1
