"""The README as a new user reads it: what Python it needs, a venv they activate before
the bare `sluice` of its later commands, and no pointer to a document they do not have."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def first_commands() -> str:
    """The README's first code block: what a new user runs first."""
    return README.split("```bash\n", 1)[1].split("```", 1)[0]


def test_readme_says_the_python_it_needs_before_the_first_command() -> None:
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert requires == ">=3.11"
    before_first_command = README.split("```bash\n", 1)[0] + first_commands()
    assert "Python 3.11 or newer" in before_first_command


def test_readme_activates_the_venv_before_its_bare_sluice_commands() -> None:
    commands = first_commands()
    activate = commands.index(". .venv/bin/activate")
    bare = re.search(r"(?m)(^|&& |\s)sluice ", commands)
    assert bare is not None and bare.start() > activate
    assert ".venv/bin/sluice" not in commands


def test_readme_names_no_document_outside_the_repository() -> None:
    for text in (README, (ROOT / "CONTRIBUTING.md").read_text()):
        assert "DESIGN.md" not in text
        assert re.search(r"(?i)\bissue \d+", text) is None
