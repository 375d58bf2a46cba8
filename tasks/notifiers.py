"""Built-in callbacks: ``Webhook`` posts a callback's context as JSON to a URL.

The URL is read from an environment variable of the worker when the callback runs, never
from the DAG file or the database, so a secret webhook URL is never stored or printed.
The payload is Slack-compatible (``text``) and carries the context's fields beside it.
"""

from __future__ import annotations

import os
from typing import Any

DEFAULT_ENV = "SLUICE_WEBHOOK_URL"
TIMEOUT_SECONDS = 10.0
FIELDS = ("dag_id", "run_id", "task_id", "try_number", "state", "kind", "error", "url")


class Webhook:
    """``on_failure_callback=Webhook()``: POST JSON to the URL in ``$SLUICE_WEBHOOK_URL``
    (or ``url_env``). A non-2xx answer raises, so the callback is retried with backoff."""

    def __init__(self, url_env: str = DEFAULT_ENV, *, timeout: float = TIMEOUT_SECONDS) -> None:
        if not isinstance(url_env, str) or not url_env:
            raise ValueError("url_env names the environment variable holding the URL")
        self.url_env = url_env
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"Webhook(url_env={self.url_env!r})"

    def payload(self, context: dict[str, Any]) -> dict[str, Any]:
        """The JSON posted: a one-line ``text`` and the context's fields."""
        what = context.get("task_id") or "the run"
        text = (
            f"Sluice: {context.get('dag_id')} {context.get('run_id')}: {what} "
            f"{context.get('state')} ({context.get('kind')})"
        )
        if context.get("error"):
            text += f": {context['error']}"
        if context.get("url"):
            text += f" <{context['url']}>"
        return {"text": text, **{k: context.get(k) for k in FIELDS}}

    def __call__(self, context: dict[str, Any]) -> None:
        url = os.environ.get(self.url_env)
        if not url:
            raise RuntimeError(f"the webhook URL variable {self.url_env} is not set on the worker")
        import httpx  # on first use: a DAG file that imports sluice loads no HTTP client

        response = httpx.post(url, json=self.payload(context), timeout=self.timeout)
        response.raise_for_status()
