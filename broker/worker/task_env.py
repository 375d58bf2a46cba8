"""What a task sees of the deployment's secrets: not the variables, and `***` in its logs.

A worker's environment holds `SLUICE_DATABASE_URL`, `SLUICE_BROKER_URL` (passwords
included), often `SLUICE_API_TOKEN`; a task that printed `os.environ` or ran `env` put
them in its log, which the API serves without a token by default.

- `hide_secrets(settings)` removes `SECRET_VARIABLES` from this process's environment,
  except those `SLUICE_TASK_ENV_ALLOW` names. It runs once the settings are built (they are
  passed in and never read from the environment again): at `worker_init` (the worker's
  main process, whose threads run the tasks of a threads or solo pool, the embedded worker
  included; prefork children fork from it), at `worker_process_init` (each prefork child,
  for a main process Sluice did not start) and before `sluice backfill --local` loads the
  DAG. A shell task's command gets `os.environ` as it is then, so the same.
- `masker_for(settings)` replaces each secret value in a text with `***`: the URLs whole,
  their passwords (as written and decoded), the API token, each Fernet key, the value
  of every hidden variable, and the password of every `SLUICE_CONN_<NAME>` URI of the
  worker's environment (which tasks see, as Airflow's `AIRFLOW_CONN_*`); values shorter
  than `MIN_SECRET_CHARS` are left (they would mask common words). The task log capture
  masks each line it keeps (`task_logs.LogBuffer`) and what it mirrors to the worker's
  output; `masked_error` masks a try's stored error.
- The secrets a try reads (`Connection.get`, `Variable.get`: `secret_reads`) join its
  capture's masker for that try (`TaskLogCapture.add_secrets`), in every form a log may
  show them (`masked_forms`: as is, URL-quoted, JSON-escaped, as Python's repr writes them).

This keeps secrets out of logs by accident. It is no sandbox: code running as the worker's
user can still read the worker's memory or `/proc/<pid>/environ` of its parent.
"""

from __future__ import annotations

import functools
import json
import os
import re
import threading
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from typing import Any
from urllib.parse import quote, quote_plus, unquote, urlsplit

from sluice.scheduler.core.settings import SECRET_VARIABLES, Settings
from sluice.tasks.secrets import CONN_PREFIX

MASK = "***"
MIN_SECRET_CHARS = 4
"""Shorter values are not masked."""

_lock = threading.Lock()
_hidden: dict[str, str] = {}
"""The values removed from this process's environment, by name (kept to mask them)."""


def hide_secrets(settings: Settings, environ: MutableMapping[str, str] | None = None) -> None:
    """Remove the secret variables `settings.task_env_allow` does not name from `environ`
    (this process's environment by default); idempotent."""
    environ = os.environ if environ is None else environ
    with _lock:
        for name in settings.hidden_from_tasks:
            if name in environ:
                _hidden[name] = environ.pop(name)


def secret_values(settings: Settings, environ: Mapping[str, str] | None = None) -> frozenset[str]:
    """Every value `masker_for` masks (see the module)."""
    environ = os.environ if environ is None else environ
    urls = [settings.database_url, settings.broker_url, settings.wakeup_url]
    urls.append(settings.result_backend)
    with _lock:
        values = set(_hidden.values())
    values.update(environ[name] for name in SECRET_VARIABLES if environ.get(name))
    values.update(settings.fernet_key)
    for url in [u for u in urls if u] + [v for v in values if "://" in v]:
        values.add(url)
        values.update(_passwords(url))
    for name, uri in environ.items():  # a task sees these, as Airflow's AIRFLOW_CONN_*
        if name.startswith(CONN_PREFIX):
            values.update(_passwords(uri))
    return frozenset(v for v in values if len(v) >= MIN_SECRET_CHARS)


def _passwords(url: str) -> Iterable[str]:
    try:
        password = urlsplit(url).password
    except ValueError:
        return ()
    return (password, unquote(password)) if password else ()


def masked_forms(values: Iterable[str]) -> frozenset[str]:
    """Each value as a log may show it: as is, URL-quoted (`%40`, `+` for a space),
    JSON-escaped (ASCII or not) and as Python's repr writes it (inside its quotes); the
    forms shorter than `MIN_SECRET_CHARS` left out."""
    forms: set[str] = set()
    for value in values:
        if not value:
            continue
        forms.update(
            (
                value,
                quote(value, safe=""),
                quote(value),
                quote_plus(value, safe=""),
                json.dumps(value)[1:-1],
                json.dumps(value, ensure_ascii=False)[1:-1],
                repr(value)[1:-1],
            )
        )
    return frozenset(f for f in forms if len(f) >= MIN_SECRET_CHARS)


class Masker:
    """Replaces every occurrence of the given values in a text with `MASK` (the longest
    first, so no part of a longer secret is left around a shorter one)."""

    def __init__(self, values: Iterable[str]) -> None:
        self.values = frozenset(values)
        ordered = sorted(self.values, key=len, reverse=True)
        self._pattern = re.compile("|".join(map(re.escape, ordered))) if ordered else None

    def __call__(self, text: str) -> str:
        if self._pattern is None or not text:
            return text
        return self._pattern.sub(MASK, text)

    def with_(self, values: Iterable[str]) -> Masker:
        """A masker of these values and `values`."""
        return _masker_with(self.values | frozenset(values))


def masker_for(settings: Settings) -> Masker:
    """The masker of `settings`' secrets and this process's hidden variables."""
    return _masker(secret_values(settings))


@functools.lru_cache(maxsize=8)
def _masker(values: frozenset[str]) -> Masker:
    return Masker(values)


@functools.lru_cache(maxsize=32)
def _masker_with(values: frozenset[str]) -> Masker:
    """`Masker.with_`'s, apart: the tries' secrets never push the deployment's out."""
    return Masker(values)


def masked_error(
    settings: Settings, values: dict[str, Any], mask: Callable[[str], str] | None = None
) -> dict[str, Any]:
    """A try's result values with its `error` masked: by `mask` (the try's capture's,
    which has the secrets the try read too), else by the deployment's."""
    error = values.get("error")
    if not error:
        return values
    mask = masker_for(settings) if mask is None else mask
    return {**values, "error": mask(error)}
