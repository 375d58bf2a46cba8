"""`sluice COMMAND` builds only its own module's parser (`cli.main.COMMANDS`); `sluice
--help` and an unknown command still see every command."""

from __future__ import annotations

import argparse
import re

import pytest

from sluice.scheduler.cli.main import COMMANDS, MODULES, build_parser


def commands(parser: argparse.ArgumentParser) -> list[str]:
    """The commands its usage line offers (`{db,scheduler,...}`)."""
    found = re.search(r"\{([a-z_,-]+)\}", parser.format_usage())
    assert found is not None, parser.format_usage()
    return found[1].split(",")


def test_every_command_is_named_by_the_module_that_adds_it() -> None:
    every = commands(build_parser())
    assert sorted(every) == sorted(COMMANDS)
    assert set(COMMANDS.values()) == set(MODULES)
    for command, module in COMMANDS.items():
        alone = commands(build_parser(command))
        assert command in alone
        assert {COMMANDS[c] for c in alone} == {module}


@pytest.mark.parametrize("first", [None, "--help", "nosuch", "-h"])
def test_help_and_unknown_words_build_every_command(first: str | None) -> None:
    assert sorted(commands(build_parser(first))) == sorted(COMMANDS)


def test_a_command_parses_as_it_did_with_every_command() -> None:
    words = ["dags", "trigger", "etl", "--conf", "{}"]
    assert vars(build_parser("dags").parse_args(words)) == vars(build_parser().parse_args(words))
