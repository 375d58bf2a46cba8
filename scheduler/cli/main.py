"""Entry point of the `sluice` command: parse, dispatch, turn user errors into one line."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from sluice.scheduler.cli import api_cmd, backfill, dags, services, standalone, status, tasks_cmd
from sluice.scheduler.cli.context import Cli
from sluice.scheduler.control.inputs import InputError
from sluice.scheduler.core.migrate import SchemaNotReady
from sluice.scheduler.core.settings import ConfigError, Settings

USAGE_ERROR = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(USAGE_ERROR, f"sluice: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="sluice", description="Run DAGs of tasks on Celery workers.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    services.add_parsers(sub)
    dags.add_parsers(sub)
    tasks_cmd.add_parsers(sub)
    standalone.add_parsers(sub)
    backfill.add_parsers(sub)
    status.add_parsers(sub)
    api_cmd.add_parsers(sub)
    return parser


def _default_level(command: str) -> str:
    daemons = {"scheduler", "worker", "standalone", "backfill", "api"}
    return "INFO" if command in daemons else "WARNING"


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=os.environ.get("SLUICE_LOG_LEVEL") or _default_level(args.command),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("alembic").setLevel(logging.WARNING)
    try:
        cli = Cli(Settings.from_env(), role=args.command)
        return int(args.func(cli, args))
    except (InputError, SchemaNotReady, ConfigError) as exc:
        print(f"sluice: error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
