"""The `sluice` command's argument parser: a usage error is one line and exit code 2, and
a command may have a default subcommand.

A default subcommand takes the arguments that start with no subcommand's name: `sluice
backfill DAG_ID --start ... --end ...` is backfill's default form, beside its subcommand
`sluice backfill cancel DAG_ID`. Each form is a real argparse subparser, with its own
arguments, help and errors; only the choice of the default is ours.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

USAGE_ERROR = 2


class CommandParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (`sluice: error: ...`) and exit 2."""

    default_subcommand: str | None = None
    """The subcommand given the arguments when the first names none of `subcommands`."""
    subcommands: frozenset[str] = frozenset()

    def error(self, message: str) -> NoReturn:
        self.exit(USAGE_ERROR, f"sluice: error: {message}\n")

    def with_default(self, default: str, subcommands: argparse._SubParsersAction[Any]) -> None:
        """Make `default`, one of the parsers of `subcommands` (what `add_subparsers`
        returned), the one that arguments naming none of them go to."""
        self.default_subcommand = default
        self.subcommands = frozenset(subcommands.choices)

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        if self.default_subcommand is not None:
            given = list(sys.argv[1:] if args is None else args)
            if not given or given[0] not in self.subcommands:
                given.insert(0, self.default_subcommand)
            args = given
        return super().parse_known_args(args, namespace)
