"""docker-compose.yml is a file users run: it parses, follows the compose specification,
and every service runs a real `sluice` command line with settings Sluice knows."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from opentelemetry.sdk import environment_variables

from sluice.scheduler.cli.main import build_parser
from sluice.scheduler.core.settings import VARIABLE_FIELDS
from sluice.scheduler.core.settings import variable as variable_of

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
SOURCES = [ROOT / "sluice", ROOT / "tasks", ROOT / "scheduler", ROOT / "broker"]


def services() -> dict[str, dict[str, Any]]:
    return dict(yaml.safe_load(COMPOSE.read_text())["services"])


def sluice_settings() -> set[str]:
    """Every SLUICE_* variable the package reads: the settings model's, and those named
    as a literal (what a task's process is given)."""
    names = {variable_of(name) for name in VARIABLE_FIELDS}
    for path in (p for folder in SOURCES for p in folder.rglob("*.py")):
        names.update(re.findall(r"[\"'](SLUICE_[A-Z_]+)[\"']", path.read_text()))
    return names


def otel_settings() -> set[str]:
    return {v for k, v in vars(environment_variables).items() if k.startswith("OTEL_")}


def test_compose_follows_the_compose_specification() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec"]
        + [str(COMPOSE)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("name", sorted(services()))
def test_each_service_runs_a_real_command_with_known_settings(name: str) -> None:
    service = services()[name]
    for variable in service.get("environment", {}):
        if variable.startswith("SLUICE_"):
            assert variable in sluice_settings(), f"{name}: unknown setting {variable}"
        elif variable.startswith("OTEL_"):
            assert variable in otel_settings(), f"{name}: unknown setting {variable}"
    command = service.get("command")
    if command is None:  # an upstream image (postgres, redis, jaeger)
        assert "image" in service and "sluice" not in str(service["image"])
        return
    argv = shlex.split(command)
    assert argv[:2] == ["sh", "-c"], f"{name}: {command}"
    sluice_line = argv[2].split("&&")[-1].strip()
    words = shlex.split(sluice_line)
    assert words[0] == "sluice", f"{name}: {sluice_line}"
    args = build_parser().parse_args(words[1:])  # exits (fails the test) on a bad line
    assert callable(args.func)


def test_services_that_need_the_schema_wait_for_the_migration() -> None:
    for name, service in services().items():
        if name in ("migrate", "postgres", "redis", "jaeger"):
            continue
        depends = service.get("depends_on", {})
        assert depends.get("migrate", {}).get("condition") == "service_completed_successfully"
        assert depends.get("postgres", {}).get("condition") == "service_healthy", name
