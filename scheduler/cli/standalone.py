"""`sluice standalone`: SQLite, an embedded broker, a scheduler and a worker in one process.

It needs no server: the broker is kombu's in-memory transport and the worker
runs on a thread pool inside this process. `SLUICE_BROKER_URL` is ignored.
"""

from __future__ import annotations

import argparse
import logging
import threading
import time
from typing import Any

from sqlalchemy import func, select

from sluice.scheduler.cli.context import Cli, CliError
from sluice.scheduler.cli.tasks_cmd import print_states, ti_rows
from sluice.scheduler.core.callback_kinds import Status
from sluice.scheduler.core.db import transaction, utcnow
from sluice.scheduler.core.migrate import upgrade
from sluice.scheduler.core.models import Dag, DagRun, DueCallback
from sluice.scheduler.core.states import RUN_TERMINAL, DagRunState, RunType
from sluice.scheduler.scheduling.dagrun import create_dagrun

log = logging.getLogger("sluice.standalone")


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("standalone", help="SQLite + embedded broker + scheduler + worker")
    p.add_argument(
        "--trigger", metavar="DAG_ID", help="run one run of DAG_ID to its end, then exit"
    )
    p.add_argument("--conf", help="conf JSON for the --trigger run")
    p.add_argument("-c", "--concurrency", type=int, default=4)
    p.add_argument("--json", action="store_true", help="print the final task states as JSON")
    p.set_defaults(func=standalone)


def all_queues(cli: Cli) -> list[str]:
    with cli.factory() as session:
        specs = session.scalars(select(Dag.serialized).where(Dag.is_active.is_(True))).all()
    queues = {"default", cli.settings.callback_queue}
    for spec in specs:
        queues.update(t.get("queue") or "default" for t in spec["tasks"].values())
    return sorted(queues)


def standalone(cli: Cli, args: argparse.Namespace) -> int:
    from sluice.broker.publisher import publish, publish_callbacks
    from sluice.broker.wakeup import waker_for
    from sluice.broker.worker.embedded import EmbeddedBroker
    from sluice.scheduler.cli.services import install_stop_handlers
    from sluice.scheduler.control.inputs import INT_MAX, check_int, parse_conf
    from sluice.scheduler.jobs.scheduler_job import SchedulerJob

    conf: dict[str, Any] = parse_conf(args.conf, max_bytes=cli.settings.max_conf_bytes)
    check_int(args.concurrency, "-c", 1, INT_MAX)
    cli.dags_folder()  # every argument is checked before the database is created
    cli.settings = cli.settings.with_(embedded_broker=True, broker_url="memory://")
    upgrade(cli.engine)
    cli.sync_dags()
    run_pk: int | None = None
    if args.trigger:
        with transaction(cli.factory) as session:
            dag = cli.get_dag(session, args.trigger)
            run = create_dagrun(
                session,
                dag,
                run_type=RunType.MANUAL,
                logical_date=utcnow(),
                now=utcnow(),
                conf=conf,
            )
            run_pk = run.id
        log.info("triggered %s %s", args.trigger, run.run_id)
    from sluice.broker.worker.tracing import instrument_celery
    from sluice.scheduler.core.tracing import Tracing

    tracing = Tracing("sluice-standalone")
    instrument_celery(tracing)  # the worker runs in this process
    embedded = EmbeddedBroker(cli.settings)
    embedded.start(all_queues(cli), args.concurrency)
    waker = waker_for(cli.settings)
    job = SchedulerJob(
        cli.settings,
        cli.factory,
        lambda messages: publish(embedded.app, messages),
        waker,
        tracing=tracing,
        publish_callbacks=lambda messages: publish_callbacks(embedded.app, messages),
    )
    install_stop_handlers(job)
    done = threading.Event()
    if run_pk is not None:
        _stop_when_finished(cli, job, run_pk, done)
    try:
        job.run()
    finally:
        embedded.stop()
    if run_pk is None:
        return 0
    with cli.factory() as session:
        final = session.get(DagRun, run_pk)
        assert final is not None
        print_states(ti_rows(session, final), args.json)
        print(f"run {final.run_id}: {final.state}")
        if final.state not in RUN_TERMINAL:
            raise CliError("stopped before the run finished")
        return 0 if final.state == DagRunState.SUCCESS else 1


CALLBACK_GRACE_SECONDS = 10.0
"""How long `--trigger` waits, once its run has ended, for the run's callbacks to run."""


def _stop_when_finished(cli: Cli, job: Any, run_pk: int, done: threading.Event) -> None:
    """Wrap the job's tick so the loop stops once the triggered run is finished and its
    callbacks have run (or `CALLBACK_GRACE_SECONDS` after its end: they stay due for the
    next start)."""
    tick = job.tick
    ended_at: float | None = None

    def tick_and_check(now: Any) -> Any:
        nonlocal ended_at
        result = tick(now)
        with cli.factory() as session:
            state = session.scalar(select(DagRun.state).where(DagRun.id == run_pk))
            waiting = state in RUN_TERMINAL and session.scalar(
                select(func.count())
                .select_from(DueCallback)
                .where(DueCallback.dag_run_id == run_pk, DueCallback.status.in_(Status.UNFINISHED))
            )
        if state in RUN_TERMINAL:
            ended_at = ended_at or time.monotonic()
            if not waiting or time.monotonic() - ended_at > CALLBACK_GRACE_SECONDS:
                job.stopping = True
                done.set()
        return result

    job.tick = tick_and_check
