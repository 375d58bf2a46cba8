"""`sluice dags watch-state DAG_ID [--json]`: a watched DAG's last evaluation, cursor,
error and the run keys it made runs for (the newest 100)."""

from __future__ import annotations

import argparse
import json

from sluice.scheduler.cli.context import Cli, CliError, iso
from sluice.scheduler.cli.render import visible
from sluice.scheduler.core.db import transaction
from sluice.scheduler.core.queries.watches import keys_seen, watch_of


def add_watch_state_parser(cmds: argparse._SubParsersAction) -> None:
    p = cmds.add_parser(
        "watch-state", help="a watched DAG's last evaluation, cursor, error and keys seen"
    )
    p.add_argument("dag_id")
    p.add_argument("--json", action="store_true", help="print it as one JSON document")
    p.set_defaults(func=watch_state)


def watch_state(cli: Cli, args: argparse.Namespace) -> int:
    with transaction(cli.factory) as session:
        cli.get_dag(session, args.dag_id)
        watch = watch_of(session, args.dag_id)
        if watch is None:
            raise CliError(f"DAG {args.dag_id!r} is not scheduled by a watch")
        keys = [{"run_key": k.run_key, "run_id": k.run_id} for k in keys_seen(session, args.dag_id)]
        state = {
            "dag_id": watch.dag_id,
            "evaluations": watch.evaluations,
            "last_evaluation": iso(watch.last_eval_at),
            "next_evaluation": iso(watch.next_eval_at),
            "cursor": watch.cursor,
            "error": watch.last_error,
            "error_at": iso(watch.error_at),
            "keys": keys,
        }
    if args.json:
        print(json.dumps(state, indent=2))
        return 0
    for name in ("dag_id", "evaluations", "last_evaluation", "next_evaluation", "cursor"):
        print(f"{name}: {visible(str(state[name]))}")
    print(f"error: {visible(str(state['error'] or '-'))}")
    print(f"keys seen ({len(keys)}, newest first):")
    for key in keys:
        print(f"  {visible(key['run_key'])} -> {visible(key['run_id'])}")
    return 0
