"""The API's own settings, read once from the environment when the app is created.

| variable | meaning |
|---|---|
| `SLUICE_API_TOKEN` | the bearer token every write needs; unset: the API refuses writes |
| `SLUICE_API_READ_AUTH` | `1`/`true`: reads need the token too (default: reads are open) |
| `SLUICE_TRACE_URL` | a link template, e.g. `http://jaeger:16686/trace/{trace_id}` |
| `SLUICE_API_MAX_BODY_BYTES` | the largest request body read (default 1 MiB); larger: 413 |
| `SLUICE_API_DAG_CACHE_BYTES` | what the cache of DAG shapes (task order, task list) holds |
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from sluice.scheduler.core.settings import ConfigError, env_int

TRACE_PLACEHOLDER = "{trace_id}"

MAX_BODY_BYTES = 1_048_576
DAG_CACHE_BYTES = 64 * 1_048_576


def _flag(env: Mapping[str, str], name: str) -> bool:
    raw = (env.get(name) or "").strip().lower()
    if raw in ("", "0", "false", "no", "off"):
        return False
    if raw in ("1", "true", "yes", "on"):
        return True
    raise ConfigError(f"{name} must be 1 or 0, got {raw!r}")


@dataclass(frozen=True)
class ApiConfig:
    token: str | None = None
    read_auth: bool = False
    trace_url: str | None = None
    max_body_bytes: int = MAX_BODY_BYTES
    """A request body over this many bytes is refused (413) before it is read."""
    dag_cache_bytes: int = DAG_CACHE_BYTES
    """About how much the cache of DAG shapes (`views.ShapeCache`) holds."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ApiConfig:
        env = os.environ if env is None else env
        token = (env.get("SLUICE_API_TOKEN") or "").strip() or None
        trace_url = (env.get("SLUICE_TRACE_URL") or "").strip() or None
        if trace_url is not None and TRACE_PLACEHOLDER not in trace_url:
            raise ConfigError(f"SLUICE_TRACE_URL must contain {TRACE_PLACEHOLDER}")
        return cls(
            token=token,
            read_auth=_flag(env, "SLUICE_API_READ_AUTH"),
            trace_url=trace_url,
            max_body_bytes=env_int(env, "SLUICE_API_MAX_BODY_BYTES", MAX_BODY_BYTES),
            dag_cache_bytes=env_int(env, "SLUICE_API_DAG_CACHE_BYTES", DAG_CACHE_BYTES),
        )

    def trace_link(self, trace_id: str | None) -> str | None:
        """The trace viewer's link for `trace_id`, or None without a template or an id."""
        if self.trace_url is None or not trace_id:
            return None
        return self.trace_url.replace(TRACE_PLACEHOLDER, trace_id)
