"""The `--map-index` option of the commands that name one task instance."""

from __future__ import annotations

import argparse

from sluice.scheduler.cli.context import CliError
from sluice.scheduler.control.inputs import MAX_MAP_INDEX


def add_map_index_argument(parser: argparse.ArgumentParser, help_text: str) -> None:
    parser.add_argument("--map-index", type=str, default=None, metavar="N", help=help_text)


def checked_map_index(args: argparse.Namespace) -> int | None:
    """`--map-index` as an int (None when not given), or a CliError in one line."""
    raw = args.map_index
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise CliError(f"--map-index must be a whole number, got {raw[:40]!r}") from None
    if not 0 <= value <= MAX_MAP_INDEX:
        raise CliError(f"--map-index must be between 0 and {MAX_MAP_INDEX}, got {value}")
    return value
