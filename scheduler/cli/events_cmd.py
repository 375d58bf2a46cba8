"""`sluice events send KEY [--payload JSON]`: send an event, which resumes every task
deferred on `sluice.triggers.Event(KEY)` (and, stored, those that defer on it later in a
run queued before it was sent).

The key and the payload are checked before anything is written (one line, exit 2); the
event and the resumes are one transaction (`core.queries.events.resume_on_event`), and
the schedulers are woken after it commits. Prints `resumed N`: the tasks it resumed.
"""

from __future__ import annotations

import argparse

from sluice.scheduler.cli.context import Cli
from sluice.scheduler.control import operations
from sluice.scheduler.control.inputs import check_event_key, parse_conf
from sluice.scheduler.core.db import transaction, utcnow
from sluice.scheduler.core.queries.events import resume_on_event


def add_parsers(sub: argparse._SubParsersAction) -> None:
    events = sub.add_parser("events", help="send the events deferred tasks wait on")
    cmds = events.add_subparsers(dest="events_cmd", required=True)
    p = cmds.add_parser(
        "send", help="send an event: resume the tasks waiting on Event(KEY), print how many"
    )
    p.add_argument("key", help="the event's key, as in sluice.triggers.Event(key)")
    p.add_argument(
        "--payload",
        help="a JSON object, the resumed tasks' context['trigger_event'] (default: {})",
    )
    p.set_defaults(func=send)


def send(cli: Cli, args: argparse.Namespace) -> int:
    key = check_event_key(args.key)
    payload = parse_conf(
        args.payload,
        max_bytes=cli.settings.max_conf_bytes,
        max_depth=cli.settings.max_conf_depth,
        what="--payload",
    )
    operations.ready_to_wake(cli.settings)
    with transaction(cli.factory) as session:
        resumed = resume_on_event(session, key, payload, utcnow())
    if resumed:
        operations.wake_schedulers(cli.settings)
    print(f"resumed {resumed}")
    return 0
