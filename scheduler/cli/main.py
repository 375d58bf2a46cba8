"""Entry point of the `sluice` command: parse, dispatch, turn user errors into one line.

A user's error is one line on stderr and exit code 2, never a traceback: bad input
(`InputError`, checked before anything is written), a schema not migrated, a bad
setting, an argument that is not valid UTF-8, a database that cannot be reached
(the line names its host, never its password) or that refuses a value.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence

from sqlalchemy.exc import DataError, InterfaceError, OperationalError

from sluice.scheduler.cli import environment
from sluice.scheduler.cli.context import Cli
from sluice.scheduler.cli.parser import USAGE_ERROR, CommandParser
from sluice.scheduler.cli.render import visible
from sluice.scheduler.control.inputs import InputError
from sluice.scheduler.core.db_wait import database_place, database_reason
from sluice.scheduler.core.migrate import SchemaNotReady
from sluice.scheduler.core.settings import ConfigError, Settings

MODULES = (
    "services",
    "dags",
    "tasks_cmd",
    "events_cmd",
    "assets_cmd",
    "concurrency_cmd",
    "users_cmd",
    "secrets_cmd",
    "standalone",
    "backfill",
    "status",
    "api_cmd",
)
"""The modules of `sluice.scheduler.cli` that add the commands, in `--help`'s order."""
COMMANDS = {
    "db": "services",
    "scheduler": "services",
    "worker": "services",
    "triggerer": "services",
    "pools": "services",
    "dags": "dags",
    "tasks": "tasks_cmd",
    "events": "events_cmd",
    "assets": "assets_cmd",
    "concurrency": "concurrency_cmd",
    "users": "users_cmd",
    "tokens": "users_cmd",
    "connections": "secrets_cmd",
    "variables": "secrets_cmd",
    "secrets": "secrets_cmd",
    "standalone": "standalone",
    "backfill": "backfill",
    "status": "status",
    "api": "api_cmd",
}
"""Each command, by the module that adds it (tests/unit/test_cli_commands.py checks the
two agree)."""


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or only of the module that adds `command` (a known
    command): a command imports no other command's module (their imports cost a
    process a fifth of its start)."""
    parser = CommandParser(
        prog="sluice",
        description="Run DAGs of tasks on Celery workers.",
        epilog=environment.epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=CommandParser)
    names = MODULES if command not in COMMANDS else (COMMANDS[command],)
    for name in names:
        importlib.import_module(f"sluice.scheduler.cli.{name}").add_parsers(sub)
    return parser


def _default_level(command: str) -> str:
    daemons = {"scheduler", "worker", "backfill", "api", "triggerer"}
    return "INFO" if command in daemons else "WARNING"


def log_level(args: argparse.Namespace, settings: Settings) -> str:
    """The root log level: `-v` INFO, `-vv` DEBUG (where a command has `-v`), else
    `SLUICE_LOG_LEVEL`, else INFO for daemons and WARNING for the rest. `sluice
    standalone` is not counted a daemon: by default it prints its own lines (one per
    try that ends), the warnings and the errors, not the INFO lines of its scheduler,
    its worker and Celery."""
    verbose = getattr(args, "verbose", 0) or 0
    if verbose:
        return "DEBUG" if verbose > 1 else "INFO"
    return settings.log_level or _default_level(args.command)


def not_utf8(argv: Sequence[str]) -> str | None:
    """Why an argument cannot be used (the shell passed bytes that are not UTF-8: Python
    holds them as lone surrogates), or None."""
    for number, arg in enumerate(argv, start=1):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            try:
                shown = os.fsencode(arg)  # the bytes the shell passed
            except UnicodeEncodeError:
                shown = arg.encode("utf-8", "backslashreplace")
            return f"argument {number} is not valid UTF-8 text: {shown!r}"
    return None


def _database_url(cli: Cli | None) -> str:
    """The database the command used (a command may set it: `standalone --database-url`)."""
    return "" if cli is None else cli.settings.database_url


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    problem = not_utf8(argv)
    if problem is not None:
        print(f"sluice: error: {problem}", file=sys.stderr)
        return USAGE_ERROR
    args = build_parser(argv[0] if argv else None).parse_args(argv)
    cli: Cli | None = None
    try:
        settings = Settings.from_env()  # a bad variable: ConfigError, one line, exit 2
        logging.basicConfig(
            level=log_level(args, settings),
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
            stream=sys.stderr,
        )
        logging.getLogger("alembic").setLevel(logging.WARNING)
        cli = Cli(settings, role=args.command)
        return int(args.func(cli, args))
    except (InputError, SchemaNotReady, ConfigError) as exc:
        print(f"sluice: error: {visible(str(exc))}", file=sys.stderr)
        return USAGE_ERROR
    except (OperationalError, InterfaceError) as exc:
        url = _database_url(cli)
        reason = database_reason(exc, url)
        print(
            f"sluice: error: cannot use the database at {database_place(url)}: {reason}",
            file=sys.stderr,
        )
        return USAGE_ERROR
    except DataError as exc:
        reason = database_reason(exc, _database_url(cli))
        print(f"sluice: error: the database refused a value: {reason}", file=sys.stderr)
        return USAGE_ERROR
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
