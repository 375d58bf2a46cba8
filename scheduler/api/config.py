"""The API's own settings, taken once from `Settings` when the app is created.

| variable | meaning |
|---|---|
| `SLUICE_API_TOKEN` | a shared bearer token with the admin role (users have their own) |
| `SLUICE_API_READ_AUTH` | `1`/`true`: reads need a token too (default: reads are open) |
| `SLUICE_TRACE_URL` | a link template, e.g. `http://jaeger:16686/trace/{trace_id}` |
| `SLUICE_API_MAX_BODY_BYTES` | the largest request body read (default 1 MiB); larger: 413 |
| `SLUICE_API_DAG_CACHE_BYTES` | what the cache of DAG shapes (task order, task list) holds |

They are fields of `core.settings.Settings`, which parses and checks them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass

from sluice.scheduler.core.settings import TRACE_PLACEHOLDER, Settings

MAX_BODY_BYTES: int = Settings.model_fields["api_max_body_bytes"].default
DAG_CACHE_BYTES: int = Settings.model_fields["api_dag_cache_bytes"].default


@dataclass(frozen=True)
class ApiConfig:
    token: str | None = None
    read_auth: bool = False
    trace_url: str | None = None
    max_body_bytes: int = MAX_BODY_BYTES
    """A request body over this many bytes is refused (413) before it is read."""
    dag_cache_bytes: int = DAG_CACHE_BYTES
    """About how much the cache of DAG shapes (`views.ShapeCache`) holds."""
    session_lasts: dt.timedelta = dt.timedelta(hours=12)
    """How long a web UI login lasts (`POST /api/v1/session`) before it must log in again."""

    @classmethod
    def from_settings(cls, settings: Settings) -> ApiConfig:
        return cls(
            token=settings.api_token,
            read_auth=settings.api_read_auth,
            trace_url=settings.trace_url,
            max_body_bytes=settings.api_max_body_bytes,
            dag_cache_bytes=settings.api_dag_cache_bytes,
        )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ApiConfig:
        """`from_settings(Settings.from_env(env))`: ConfigError for a bad variable."""
        return cls.from_settings(Settings.from_env(env))

    def trace_link(self, trace_id: str | None) -> str | None:
        """The trace viewer's link for `trace_id`, or None without a template or an id."""
        if self.trace_url is None or not trace_id:
            return None
        return self.trace_url.replace(TRACE_PLACEHOLDER, trace_id)
