"""`sluice assets …`: list the assets, and send an asset event from outside.

`list [--json]`: each asset with the tasks that produce it, the DAGs scheduled on it and
its last event. `event URI [--extra JSON]`: record an event on URI (checked first: one
line, exit 2, nothing written), queued for each DAG scheduled on it; the schedulers are
woken after the commit and make the runs. Prints the event's id.
"""

from __future__ import annotations

import argparse
import json

from sluice.scheduler.cli.context import Cli
from sluice.scheduler.cli.render import visible
from sluice.scheduler.cli.tables import Col, console, print_table
from sluice.scheduler.control import operations
from sluice.scheduler.control.asset_events import checked_event, send_asset_event
from sluice.scheduler.control.inputs import parse_conf
from sluice.scheduler.core.db import transaction, utcnow
from sluice.scheduler.core.queries.assets import summaries


def add_parsers(sub: argparse._SubParsersAction) -> None:
    assets = sub.add_parser("assets", help="list assets, send asset events")
    cmds = assets.add_subparsers(dest="assets_cmd", required=True)
    p = cmds.add_parser(
        "list", help="each asset, the tasks that produce it, the DAGs on it, its last event"
    )
    p.add_argument("--json", action="store_true", help="print the assets as one JSON document")
    p.set_defaults(func=list_assets)
    p = cmds.add_parser(
        "event", help="record an event on an asset: the DAGs scheduled on it may run"
    )
    p.add_argument("uri", help="the asset's URI, as in sluice.Asset(uri)")
    p.add_argument("--extra", help="a JSON object, the event's extra (default: {})")
    p.set_defaults(func=send_event)


def list_assets(cli: Cli, args: argparse.Namespace) -> int:
    with transaction(cli.factory) as session:
        found = summaries(session)
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "uri": a.uri,
                        "name": a.name,
                        "producers": a.producers,
                        "consumers": a.consumers,
                        "events": a.events,
                        "last_event": a.last_event,
                    }
                    for a in found
                ],
                indent=2,
            )
        )
        return 0
    rows = [
        (
            visible(a.uri),
            visible(", ".join(a.producers)) or "-",
            visible(", ".join(a.consumers)) or "-",
            str(a.events),
            _last(a.last_event),
        )
        for a in found
    ]
    cols = [
        Col("URI", keep=True),
        Col("PRODUCED BY"),
        Col("SCHEDULES"),
        Col("EVENTS", right=True),
        Col("LAST EVENT"),
    ]
    print_table(console(), cols, rows, empty="no assets")
    return 0


def _last(event: dict[str, object] | None) -> str:
    if event is None:
        return "-"
    source = event.get("source_dag_id")
    by = (
        f"{source}.{event.get('source_run_id')}.{event.get('source_task_id')}" if source else "sent"
    )
    return visible(f"{event['timestamp']} ({by})")


def send_event(cli: Cli, args: argparse.Namespace) -> int:
    extra = parse_conf(
        args.extra,
        max_bytes=cli.settings.max_conf_bytes,
        max_depth=cli.settings.max_conf_depth,
        what="--extra",
    )
    event = checked_event(cli.settings, args.uri, extra)
    operations.ready_to_wake(cli.settings)
    with transaction(cli.factory) as session:
        event_id = send_asset_event(session, event, utcnow())
    operations.wake_schedulers(cli.settings)
    print(f"asset event {event_id} on {visible(event.uri)}")
    return 0
