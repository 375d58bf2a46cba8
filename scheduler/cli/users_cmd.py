"""`sluice users …` and `sluice tokens …`: the people who use the API and the UI, their
roles and their bearer tokens.

`tokens create NAME` prints the new token once, alone on the last line of its output
(`$(sluice tokens create ci | tail -1)`); the database keeps only its SHA-256. Bad
input: one line, exit 2, nothing written.
"""

from __future__ import annotations

import argparse
import datetime as dt
import getpass
import json
import sys

from sluice.scheduler.cli.context import Cli
from sluice.scheduler.cli.render import visible
from sluice.scheduler.cli.tables import Col, console, print_table
from sluice.scheduler.control.inputs import InputError
from sluice.scheduler.core.db import transaction, utcnow
from sluice.scheduler.core.passwords import check_password, hash_password
from sluice.scheduler.core.queries import users as store
from sluice.scheduler.core.roles import Role

MAX_EXPIRY_DAYS = 3650


def add_parsers(sub: argparse._SubParsersAction) -> None:
    users = sub.add_parser("users", help="people who use the API and the UI, and their roles")
    cmds = users.add_subparsers(dest="users_cmd", required=True)
    p = cmds.add_parser("create", help="a user with a role: viewer, operator or admin")
    p.add_argument("name")
    p.add_argument(
        "--role",
        required=True,
        choices=[r.value for r in Role],
        help="viewer reads; operator also triggers, clears, marks, cancels; admin also "
        "sets pools and manages users",
    )
    p.set_defaults(func=create_user)
    p = cmds.add_parser("list", help="every user and role")
    p.add_argument("--json", action="store_true", help="print them as one JSON document")
    p.set_defaults(func=list_users)
    p = cmds.add_parser("delete", help="a user and every token of theirs")
    p.add_argument("name")
    p.set_defaults(func=delete_user)
    p = cmds.add_parser(
        "set-password", help="the password the user logs in to the UI with (read from stdin)"
    )
    p.add_argument("name")
    p.set_defaults(func=set_password)

    tokens = sub.add_parser("tokens", help="the API's bearer tokens of the users")
    cmds = tokens.add_subparsers(dest="tokens_cmd", required=True)
    p = cmds.add_parser("create", help="a token of a user, printed once on the last line")
    p.add_argument("name", help="the user")
    p.add_argument("--expires", type=int, metavar="DAYS", help="days until it expires")
    p.set_defaults(func=create_token)
    p = cmds.add_parser("list", help="every token: id, user, created, expires, last used")
    p.add_argument("--json", action="store_true", help="print them as one JSON document")
    p.set_defaults(func=list_tokens)
    p = cmds.add_parser("revoke", help="a token, by its id: refused from then on")
    p.add_argument("id", type=int)
    p.set_defaults(func=revoke_token)


def create_user(cli: Cli, args: argparse.Namespace) -> int:
    try:
        with transaction(cli.factory) as session:
            store.create_user(session, args.name, Role(args.role), utcnow())
    except store.UserError as exc:
        raise InputError(str(exc)) from None
    print(f"user {visible(args.name)}: {args.role}")
    return 0


def delete_user(cli: Cli, args: argparse.Namespace) -> int:
    try:
        with transaction(cli.factory) as session:
            store.delete_user(session, args.name)
    except store.UserError as exc:
        raise InputError(str(exc)) from None
    print(f"user {visible(args.name)} deleted")
    return 0


def list_users(cli: Cli, args: argparse.Namespace) -> int:
    with transaction(cli.factory) as session:
        found = [
            (u.name, u.role, u.password_hash is not None, u.created_at)
            for u in store.users(session)
        ]
    if args.json:
        document = [
            {"name": n, "role": r, "has_password": p, "created_at": c.isoformat()}
            for n, r, p, c in found
        ]
        print(json.dumps(document, indent=2))
        return 0
    rows = [
        (visible(n), r, "yes" if p else "no", c.isoformat(timespec="seconds"))
        for n, r, p, c in found
    ]
    cols = [Col("NAME", keep=True), Col("ROLE"), Col("PASSWORD"), Col("CREATED")]
    print_table(console(), cols, rows, empty="no users")
    return 0


def set_password(cli: Cli, args: argparse.Namespace) -> int:
    if sys.stdin.isatty():
        password = getpass.getpass(f"password of {args.name}: ")
    else:
        password = sys.stdin.readline().rstrip("\r\n")
    try:
        check_password(password)
        hashed = hash_password(password)
        with transaction(cli.factory) as session:
            store.set_password_hash(session, args.name, hashed)
    except (ValueError, store.UserError) as exc:
        raise InputError(str(exc)) from None
    print(f"password of {visible(args.name)} set")
    return 0


def create_token(cli: Cli, args: argparse.Namespace) -> int:
    expires = args.expires
    if expires is not None and not 1 <= expires <= MAX_EXPIRY_DAYS:
        raise InputError(f"--expires must be between 1 and {MAX_EXPIRY_DAYS} days, got {expires}")
    delta = dt.timedelta(days=expires) if expires is not None else None
    try:
        with transaction(cli.factory) as session:
            row, token = store.create_token(session, args.name, utcnow(), delta)
            token_id, until = row.id, row.expires_at
    except store.UserError as exc:
        raise InputError(str(exc)) from None
    when = until.isoformat(timespec="seconds") if until is not None else "never"
    print(f"token {token_id} of {visible(args.name)}, expires {when}; shown once, keep it:")
    print(token)
    return 0


def list_tokens(cli: Cli, args: argparse.Namespace) -> int:
    with transaction(cli.factory) as session:
        found = [
            (t.id, t.user_name, t.created_at, t.expires_at, t.last_used_at, t.revoked_at)
            for t in store.tokens(session)
        ]

    def iso(value: dt.datetime | None) -> str | None:
        return value.isoformat(timespec="seconds") if value is not None else None

    if args.json:
        document = [
            {
                "id": i,
                "user": u,
                "created_at": iso(c),
                "expires_at": iso(e),
                "last_used_at": iso(last),
                "revoked_at": iso(r),
            }
            for i, u, c, e, last, r in found
        ]
        print(json.dumps(document, indent=2))
        return 0
    rows = [
        (str(i), visible(u), iso(c) or "-", iso(e) or "never", iso(last) or "never", iso(r) or "-")
        for i, u, c, e, last, r in found
    ]
    cols = [
        Col("ID", right=True),
        Col("USER", keep=True),
        Col("CREATED"),
        Col("EXPIRES"),
        Col("LAST USED"),
        Col("REVOKED"),
    ]
    print_table(console(), cols, rows, empty="no tokens")
    return 0


def revoke_token(cli: Cli, args: argparse.Namespace) -> int:
    try:
        with transaction(cli.factory) as session:
            store.revoke_token(session, args.id, utcnow())
    except store.UserError as exc:
        raise InputError(str(exc)) from None
    print(f"token {args.id} revoked")
    return 0
