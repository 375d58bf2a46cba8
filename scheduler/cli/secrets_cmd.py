"""`sluice connections`, `sluice variables` and `sluice secrets`: what tasks read with
`Connection.get` and `Variable.get`, stored encrypted (`core.secrets_store`).

- `connections add NAME --uri URI | --json JSON`, `connections list [--json]` (never a
  password: `***`), `connections delete NAME`.
- `variables set KEY VALUE [--secret]`, `variables get KEY` (the value itself, a secret
  one too: the operator asked for it), `variables list [--json]` (`***` for a secret
  one), `variables delete KEY`.
- `secrets rotate`: every row encrypted again with the first key of SLUICE_FERNET_KEY, in
  one transaction; `secrets backends`: the installed backends and which are enabled.

Bad input (a name, a key, a value, a URI or JSON that cannot be used) and a missing key
are one line and exit 2, checked before anything is written; nothing is ever stored in
plain text.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from sluice.scheduler.cli.context import Cli, CliError
from sluice.scheduler.cli.render import visible
from sluice.scheduler.cli.tables import Col, console, print_table
from sluice.scheduler.core.db import transaction, utcnow
from sluice.scheduler.core.fernet import box_of
from sluice.scheduler.core.queries import secrets as rows
from sluice.scheduler.core.secrets_backends import installed
from sluice.scheduler.core.secrets_store import (
    add_connection,
    connection_json,
    list_connections,
    list_variables,
    read_variable,
    rotate,
    set_variable,
)
from sluice.tasks.secrets import (
    CONN_PREFIX,
    VAR_PREFIX,
    Connection,
    SecretInputError,
    check_name,
    check_value,
)

MASK = "***"


def add_parsers(sub: argparse._SubParsersAction) -> None:
    conns = sub.add_parser("connections", help="connections tasks read (Connection.get)")
    cmds = conns.add_subparsers(dest="connections_cmd", required=True)
    p = cmds.add_parser("add", help="store a connection, encrypted (SLUICE_FERNET_KEY)")
    p.add_argument("name")
    given = p.add_mutually_exclusive_group(required=True)
    given.add_argument("--uri", help="type://login:password@host:port/schema?extra=value")
    given.add_argument(
        "--json",
        dest="json_input",
        metavar="JSON",
        help="an object of conn_type, host, port, login, password, schema, extra",
    )
    p.set_defaults(func=add)
    p = cmds.add_parser("list", help="every stored connection (passwords never shown)")
    p.add_argument("--json", action="store_true", help="print them as one JSON document")
    p.set_defaults(func=list_conns)
    p = cmds.add_parser("delete", help="delete a stored connection")
    p.add_argument("name")
    p.set_defaults(func=delete_conn)

    variables = sub.add_parser("variables", help="variables tasks read (Variable.get)")
    cmds = variables.add_subparsers(dest="variables_cmd", required=True)
    p = cmds.add_parser("set", help="store a variable, encrypted (SLUICE_FERNET_KEY)")
    p.add_argument("key")
    p.add_argument("value")
    p.add_argument(
        "--secret", action="store_true", help="masked in task logs and in `variables list`"
    )
    p.set_defaults(func=set_var)
    p = cmds.add_parser("get", help="print a stored variable's value")
    p.add_argument("key")
    p.set_defaults(func=get_var)
    p = cmds.add_parser("list", help="every stored variable (*** for a secret one)")
    p.add_argument("--json", action="store_true", help="print them as one JSON document")
    p.set_defaults(func=list_vars)
    p = cmds.add_parser("delete", help="delete a stored variable")
    p.add_argument("key")
    p.set_defaults(func=delete_var)

    secrets = sub.add_parser("secrets", help="the encryption of connections and variables")
    cmds = secrets.add_subparsers(dest="secrets_cmd", required=True)
    cmds.add_parser(
        "rotate", help="encrypt every connection and variable again with the first key"
    ).set_defaults(func=rotate_keys)
    cmds.add_parser(
        "backends", help="the secrets backends installed, and which are enabled"
    ).set_defaults(func=list_backends)


def _checked(check: Any, value: str, what: str) -> str:
    try:
        result: str = check(value, what)
    except SecretInputError as exc:
        raise CliError(str(exc)) from None
    return result


def _connection_of(args: argparse.Namespace) -> Connection:
    try:
        if args.uri is not None:
            conn = Connection.from_uri(args.uri)
        else:
            try:
                data = json.loads(args.json_input)
            except ValueError as exc:
                raise CliError(f"--json is not valid JSON: {exc}") from None
            conn = Connection.from_dict(data)
        connection_json(conn)  # storable: JSON values, within the bound
    except SecretInputError as exc:
        raise CliError(str(exc)) from None
    return conn


def add(cli: Cli, args: argparse.Namespace) -> int:
    name = _checked(check_name, args.name, "connection name")
    conn = _connection_of(args)
    box = box_of(cli.settings, f"store connection {name!r}")  # no key: refused, one line
    with transaction(cli.factory) as session:
        added = add_connection(session, box, name, conn, utcnow())
    if not added:
        raise CliError(
            f"connection {name!r} exists: delete it first (sluice connections delete {name})"
        )
    print(f"connection {visible(name)} added")
    return 0


def list_conns(cli: Cli, args: argparse.Namespace) -> int:
    with transaction(cli.factory) as session:
        found = list_connections(session, cli.settings)
    entries = [
        {
            "name": name,
            "conn_type": conn.conn_type,
            "host": conn.host,
            "port": conn.port,
            "login": conn.login,
            "password": MASK if conn.password is not None else None,
            "schema": conn.schema,
        }
        for name, conn in found
    ]
    if args.json:
        print(json.dumps(entries, indent=2))
        return 0
    cols = [
        Col("NAME"),
        Col("TYPE"),
        Col("HOST"),
        Col("PORT", keep=True, right=True),
        Col("LOGIN"),
        Col("PASSWORD", keep=True),
        Col("SCHEMA"),
    ]
    table = [
        (e["name"], e["conn_type"], e["host"], e["port"], e["login"], e["password"], e["schema"])
        for e in entries
    ]
    print_table(console(), cols, table, empty=f"no connections stored (and {CONN_PREFIX}* wins)")
    return 0


def delete_conn(cli: Cli, args: argparse.Namespace) -> int:
    name = _checked(check_name, args.name, "connection name")
    with transaction(cli.factory) as session:
        deleted = rows.delete_connection(session, name)
    if not deleted:
        raise CliError(f"no connection {name!r} is stored")
    print(f"connection {visible(name)} deleted")
    return 0


def set_var(cli: Cli, args: argparse.Namespace) -> int:
    key = _checked(check_name, args.key, "variable key")
    value = _checked(check_value, args.value, "variable's value")
    box = box_of(cli.settings, f"store variable {key!r}")  # no key: refused, one line
    with transaction(cli.factory) as session:
        set_variable(session, box, key, value, is_secret=args.secret, now=utcnow())
    print(f"variable {visible(key)} set" + (" (secret)" if args.secret else ""))
    return 0


def get_var(cli: Cli, args: argparse.Namespace) -> int:
    key = _checked(check_name, args.key, "variable key")
    with transaction(cli.factory) as session:
        found = read_variable(session, cli.settings, key)
    if found is None:
        raise CliError(f"no variable {key!r} is stored")
    # as it is for a pipe or a file; a terminal is shown its control characters spelled out
    print(visible(found.value, keep_lines=True) if sys.stdout.isatty() else found.value)
    return 0


def list_vars(cli: Cli, args: argparse.Namespace) -> int:
    with transaction(cli.factory) as session:
        found = list_variables(session, cli.settings)
    entries = [
        {"key": v.key, "value": MASK if v.is_secret else v.value, "secret": v.is_secret}
        for v in found
    ]
    if args.json:
        print(json.dumps(entries, indent=2))
        return 0
    cols = [Col("KEY"), Col("SECRET", keep=True), Col("VALUE")]
    table = [(e["key"], "yes" if e["secret"] else "no", e["value"]) for e in entries]
    print_table(console(), cols, table, empty=f"no variables stored (and {VAR_PREFIX}* wins)")
    return 0


def delete_var(cli: Cli, args: argparse.Namespace) -> int:
    key = _checked(check_name, args.key, "variable key")
    with transaction(cli.factory) as session:
        deleted = rows.delete_variable(session, key)
    if not deleted:
        raise CliError(f"no variable {key!r} is stored")
    print(f"variable {visible(key)} deleted")
    return 0


def rotate_keys(cli: Cli, args: argparse.Namespace) -> int:
    box = box_of(cli.settings, "rotate the keys of connections and variables")
    with transaction(cli.factory) as session:
        conns, variables = rotate(session, box)
    print(
        f"encrypted again with the first key of SLUICE_FERNET_KEY: {conns} connection(s), "
        f"{variables} variable(s); the other keys can go"
    )
    return 0


def list_backends(cli: Cli, args: argparse.Namespace) -> int:
    found = installed(cli.settings)
    cols = [Col("NAME"), Col("ENABLED", keep=True), Col("TARGET")]
    table = [(b.name, "yes" if b.enabled else "no", b.target or "(not installed)") for b in found]
    print_table(console(), cols, table, empty="no secrets backend installed")
    order = ["the environment", *cli.settings.secrets_backends, "the database"]
    print(f"Connection.get and Variable.get read: {', then '.join(map(visible, order))}")
    return 0
