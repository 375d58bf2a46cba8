"""Checking what users type (a date, a conf), once for the CLI and the REST API.

Each check raises `InputError` with one line meant for the user; the CLI prints it and
exits 2, the API answers 4xx with it.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any


class InputError(ValueError):
    """Input that cannot be used; the message is one line for the user."""


def parse_date(text: str, what: str = "date") -> dt.datetime:
    """An ISO 8601 date or datetime; naive values are taken as UTC."""
    try:
        value = dt.datetime.fromisoformat(text)
    except ValueError:
        raise InputError(
            f"{what} {text!r} is not an ISO 8601 date (e.g. 2026-01-31T00:00:00Z)"
        ) from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value.astimezone(dt.UTC)


def parse_conf(text: str | None) -> dict[str, Any]:
    if text is None:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"--conf is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise InputError("--conf must be a JSON object, e.g. '{\"key\": 1}'")
    return value
