"""`sluice db migrate|clean`, `sluice scheduler`, `sluice triggerer`, `sluice worker`,
`sluice pools`."""

from __future__ import annotations

import argparse
import logging
import signal
from types import FrameType

from sqlalchemy import select

from sluice.scheduler.cli.context import Cli, CliError
from sluice.scheduler.cli.db_clean import add_parser as add_clean_parser
from sluice.scheduler.control.inputs import INT_MAX, check_int, check_name
from sluice.scheduler.core.db import transaction
from sluice.scheduler.core.migrate import current_revision, upgrade
from sluice.scheduler.core.models import Pool
from sluice.scheduler.core.upsert import upsert

log = logging.getLogger(__name__)


def add_parsers(sub: argparse._SubParsersAction) -> None:
    db = sub.add_parser("db", help="the database: its schema, and cleaning old history")
    db_cmds = db.add_subparsers(dest="db_cmd", required=True)
    db_cmds.add_parser("migrate", help="create or upgrade the schema").set_defaults(func=migrate)
    add_clean_parser(db_cmds)

    p = sub.add_parser("scheduler", help="run one scheduler (run as many as you like)")
    p.add_argument(
        "--num-loops",
        type=int,
        default=None,
        help="stop after this many scheduling loops (default: run until stopped)",
    )
    p.add_argument(
        "--metrics-port", type=int, default=None, help="serve Prometheus metrics on this port"
    )
    p.add_argument(
        "--metrics-host",
        default="127.0.0.1",
        help="the address the metrics are served on (default 127.0.0.1; 0.0.0.0 for all)",
    )
    p.set_defaults(func=scheduler)

    p = sub.add_parser("triggerer", help="run the triggers deferred tasks wait on")
    p.add_argument(
        "--capacity",
        type=int,
        default=1000,
        help="triggers run at once on its loop (default 1000)",
    )
    p.add_argument(
        "--num-loops",
        type=int,
        default=None,
        help="stop after this many loops (default: run until stopped)",
    )
    p.set_defaults(func=triggerer)

    p = sub.add_parser("worker", help="run a Celery worker serving Sluice queues")
    p.add_argument("-Q", "--queues", default="default", help="comma-separated Sluice queues")
    p.add_argument("-c", "--concurrency", type=int, default=4, help="tasks run at once (default 4)")
    p.add_argument(
        "--pool",
        default="prefork",
        choices=["prefork", "threads", "solo"],
        help="Celery's execution pool (default prefork: one process per task slot)",
    )
    p.add_argument(
        "--loglevel", default="INFO", help="the worker's log level (default INFO), as Celery's -l"
    )
    p.add_argument(
        "--without-callbacks",
        action="store_true",
        help="do not also serve the callback queue (SLUICE_CALLBACK_QUEUE, 'callbacks')",
    )
    p.add_argument(
        "-E",
        "--task-events",
        action="store_true",
        help="send task events, for Flower and `celery events` (Celery's -E)",
    )
    p.set_defaults(func=worker)

    pools = sub.add_parser("pools", help="list and set pools")
    pool_cmds = pools.add_subparsers(dest="pools_cmd", required=True)
    pool_cmds.add_parser("list", help="every pool and its slots").set_defaults(func=list_pools)
    p = pool_cmds.add_parser("set", help="create a pool or change its slots")
    p.add_argument("name")
    p.add_argument("slots", type=int)
    p.set_defaults(func=set_pool)


def migrate(cli: Cli, args: argparse.Namespace) -> int:
    """Create or upgrade the schema, and say which it did, at which revision."""
    before = current_revision(cli.engine)
    upgrade(cli.engine)
    after = current_revision(cli.engine)
    if before is None:
        print(f"created the schema at revision {after}")
    elif before != after:
        print(f"upgraded the schema from revision {before} to {after}")
    else:
        print(f"the schema is up to date (revision {after})")
    return 0


def install_stop_handlers(stop: object) -> None:
    def handler(signum: int, frame: FrameType | None) -> None:
        log.info("signal %s: stopping after this loop", signum)
        stop.stopping = True  # type: ignore[attr-defined]

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def scheduler(cli: Cli, args: argparse.Namespace) -> int:
    if args.metrics_port is not None:
        check_int(args.metrics_port, "--metrics-port", 1, 65535)
    if args.num_loops is not None:
        check_int(args.num_loops, "--num-loops", 0, INT_MAX)
    cli.check_bundles()  # a folder that is not there is refused before anything is written
    cli.wait_for_database()
    from sluice.broker.app import create_app
    from sluice.broker.publisher import publish, publish_callbacks
    from sluice.broker.wakeup import waker_for
    from sluice.scheduler.core.deployment import HEADER, deployment_id
    from sluice.scheduler.jobs.scheduler_job import SchedulerJob

    app = create_app(cli.settings)
    app.conf[HEADER] = cli.at_start(lambda: deployment_id(cli.factory))  # whose messages
    waker = waker_for(cli.settings)
    from sluice.scheduler.core.tracing import Tracing
    from sluice.scheduler.jobs.metrics import SchedulerMetrics

    metrics = SchedulerMetrics(cli.settings, cli.factory, args.metrics_port, host=args.metrics_host)
    job = SchedulerJob(
        cli.settings,
        cli.factory,
        lambda messages: publish(app, messages),
        waker,
        tracing=Tracing("sluice-scheduler"),
        metrics=metrics,
        publish_callbacks=lambda messages: publish_callbacks(app, messages),
    )
    install_stop_handlers(job)
    try:
        job.run(num_loops=args.num_loops)
    finally:
        waker.close()
    return 0


def triggerer(cli: Cli, args: argparse.Namespace) -> int:
    """`sluice triggerer [--capacity N]`: one triggerer (run as many as you like)."""
    check_int(args.capacity, "--capacity", 1, 100_000)
    if args.num_loops is not None:
        check_int(args.num_loops, "--num-loops", 0, INT_MAX)
    cli.check_bundles()
    cli.wait_for_database()
    from sluice.broker.wakeup import waker_for
    from sluice.broker.worker.task_env import hide_secrets
    from sluice.scheduler.jobs.triggerer import TriggererJob

    waker = waker_for(cli.settings)
    factory = cli.at_start(lambda: cli.factory)
    hide_secrets(cli.settings)  # triggers are user code: they see no secret of ours
    job = TriggererJob(cli.settings, factory, waker, capacity=args.capacity)
    install_stop_handlers(job)
    try:
        job.run(num_loops=args.num_loops)
    finally:
        waker.close()
    return 0


def worker(cli: Cli, args: argparse.Namespace) -> int:
    from sluice.broker.worker.process import WorkerOptions, start_worker

    queues = [q.strip() for q in args.queues.split(",") if q.strip()]
    if not queues:
        raise CliError("-Q needs at least one queue name")
    if args.concurrency < 1:
        raise CliError("-c must be at least 1")
    cli.wait_for_database()  # and fail early with one line if the schema is missing
    options = WorkerOptions.of(
        cli.settings,
        queues,
        args.concurrency,
        pool=args.pool,
        loglevel=args.loglevel,
        callbacks=not args.without_callbacks,
        task_events=args.task_events,
    )
    return start_worker(cli.settings, options)


def list_pools(cli: Cli, args: argparse.Namespace) -> int:
    """Each pool with its slots and the slots its queued and running tries take."""
    from sluice.scheduler.cli.tables import Col, console, print_table
    from sluice.scheduler.core.queries.tis import used_slots_by_pool

    with cli.factory() as session:
        pools = session.scalars(select(Pool).order_by(Pool.name)).all()
        used = used_slots_by_pool(session)
    columns = (
        Col("pool"),
        Col("slots", keep=True, right=True),
        Col("used", keep=True, right=True),
        Col("description"),
    )
    rows = [(p.name, p.slots, used.get(p.name, 0), p.description) for p in pools]
    print_table(console(), columns, rows, empty="no pools")
    return 0


def set_pool(cli: Cli, args: argparse.Namespace) -> int:
    check_name(args.name, "the pool name")
    check_int(args.slots, "slots", 0, INT_MAX)
    with transaction(cli.factory) as session:
        upsert(
            session,
            Pool,
            {"name": args.name, "slots": args.slots},
            keys=["name"],
            update=["slots"],
        )
    print(f"pool {args.name}: {args.slots} slots")
    return 0
