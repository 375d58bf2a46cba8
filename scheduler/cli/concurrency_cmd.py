"""`sluice concurrency list [--json]`: the concurrency keys in use, with the TIs holding
their slots and how many TIs wait for one; and the rate limits' buckets.

A read: plain SELECTs, nothing locked or written.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from typing import Any

from sluice.scheduler.cli.context import Cli
from sluice.scheduler.cli.render import visible
from sluice.scheduler.cli.tables import Col, console, print_table
from sluice.scheduler.core.db import transaction, utcnow
from sluice.scheduler.core.queries.limits import Holder, holders, read_buckets, waiting_for_keys


def add_parsers(sub: argparse._SubParsersAction) -> None:
    concurrency = sub.add_parser("concurrency", help="concurrency keys in use and rate limits")
    cmds = concurrency.add_subparsers(dest="concurrency_cmd", required=True)
    p = cmds.add_parser(
        "list", help="each concurrency key in use, the TIs holding its slots, the rate limits"
    )
    p.add_argument("--json", action="store_true", help="print them as one JSON document")
    p.set_defaults(func=list_keys)


def list_keys(cli: Cli, args: argparse.Namespace) -> int:
    now = utcnow()
    with transaction(cli.factory) as session:
        held = holders(session)
        waiting = waiting_for_keys(session)
        buckets = read_buckets(session, now)
    keys = _keys(held, waiting)
    if args.json:
        document = {
            "keys": keys,
            "rate_limits": [
                {
                    "name": b.name,
                    "limit": b.amount,
                    "per_seconds": b.per_seconds,
                    "tokens": round(b.tokens, 3),
                }
                for b in buckets
            ],
        }
        print(json.dumps(document, indent=2))
        return 0
    rows = [
        (
            visible(k["name"]),
            visible(k["key"]),
            f"{k['held']}/{k['limit']}" if k["limit"] else str(k["held"]),
            str(k["waiting"]),
            visible(", ".join(_holder_text(h) for h in k["holders"])) or "-",
        )
        for k in keys
    ]
    cols = [
        Col("NAME", keep=True),
        Col("KEY", keep=True),
        Col("HELD", right=True),
        Col("WAITING", right=True),
        Col("HOLDERS"),
    ]
    out = console()
    print_table(out, cols, rows, empty="no concurrency key in use")
    if buckets:
        bucket_rows = [
            (visible(b.name), f"{b.amount} per {b.per_seconds:g}s", f"{b.tokens:.2f}")
            for b in buckets
        ]
        bucket_cols = [Col("RATE LIMIT", keep=True), Col("RATE"), Col("TOKENS", right=True)]
        print_table(out, bucket_cols, bucket_rows, empty="")
    return 0


def _keys(held: list[Holder], waiting: dict[tuple[str, str], int]) -> list[dict[str, Any]]:
    """One entry per key held or waited for, by name then key."""
    by_key: dict[tuple[str, str], list[Holder]] = defaultdict(list)
    for h in held:
        by_key[(h.concurrency, h.key)].append(h)
    entries = []
    for name, key in sorted(set(by_key) | set(waiting)):
        mine = by_key.get((name, key), [])
        entries.append(
            {
                "name": name,
                "key": key,
                "limit": max((h.limit for h in mine), default=0),
                "held": len(mine),
                "waiting": waiting.get((name, key), 0),
                "holders": [h.as_dict() for h in mine],
            }
        )
    return entries


def _holder_text(h: dict[str, Any]) -> str:
    index = f"[{h['map_index']}]" if h["map_index"] >= 0 else ""
    return f"{h['dag_id']}/{h['run_id']}/{h['task_id']}{index} ({h['state']})"
