"""The environment variables Sluice reads, for the epilog of `sluice --help`.

Invariant: the list is generated from the settings model (`core.settings.Settings`): one
line for each field a variable sets, its description and its default; the README's
Configuration table says more of each (`tests/unit/test_settings.py` checks both).
"""

from __future__ import annotations

from pathlib import Path

from pydantic.fields import FieldInfo

from sluice.scheduler.core.settings import VARIABLE_FIELDS, Settings, variable

OTHERS: tuple[tuple[str, str], ...] = (("OTEL_*", "OpenTelemetry exporters (traces, metrics)"),)
"""Variables read by the libraries Sluice uses, not by its settings."""


def _default(value: object) -> str | None:
    """A default as `--help` shows it; None for none (the description says what then)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, frozenset):
        return ", ".join(sorted(value)) or "none"
    if isinstance(value, tuple):
        return ", ".join(map(str, value)) or "none"
    if isinstance(value, Path):
        return str(value)
    return str(value)


def _meaning(field: FieldInfo) -> str:
    """The field's description, then its default in brackets (a default that follows
    another setting is a factory, and the description says it)."""
    text = field.description or ""
    shown = None if field.default_factory is not None else _default(field.default)
    return text if shown is None else f"{text} ({shown})"


def variables() -> list[tuple[str, str]]:
    """(variable, what it sets) for every field of `Settings` a variable sets, in order."""
    fields = Settings.model_fields
    return [(variable(name), _meaning(fields[name])) for name in VARIABLE_FIELDS]


def epilog() -> str:
    """The names and what each sets, one line each, aligned."""
    lines = [*variables(), *OTHERS]
    width = max(len(name) for name, _ in lines)
    head = "environment variables (read at start; the README's Configuration says more):"
    return "\n".join([head, *(f"  {name.ljust(width)}  {meaning}" for name, meaning in lines)])
