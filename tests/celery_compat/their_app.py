"""A user's "existing" Celery app: its own tasks, its own queue, its own result backend.

`make_app` builds it the way a user would, then calls `sluice.attach` on it.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from celery import Celery

from sluice.broker.worker.attaching import attach

THEIR_QUEUE = "their_queue"


def make_app(
    broker_url: str, *, attach_sluice: bool = True, backend_url: str | None = None, **conf: Any
) -> Celery:
    """The user's app on `broker_url` (results in `backend_url`, by default the broker's
    Redis), with Sluice attached."""
    backend = backend_url or broker_url
    app = Celery("their_module", broker=broker_url, backend=backend, set_as_current=False)
    app.conf.update(
        task_default_queue=THEIR_QUEUE,
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        broker_connection_retry_on_startup=True,
        **conf,
    )

    @app.task(name="their_module.add", shared=False)
    def add(x: int, y: int) -> int:
        return x + y

    @app.task(name="their_module.flaky", shared=False)
    def flaky(marker: str) -> str:
        """Fails the first time it is called with `marker` (a file path), then succeeds."""
        path = Path(marker)
        if not path.exists():
            path.write_text("called")
            raise ValueError("first call fails")
        return "second call ok"

    @app.task(name="their_module.boom", shared=False)
    def boom() -> None:
        raise ValueError("boom")

    @app.task(name="their_module.record", shared=False)
    def record(context: dict[str, Any]) -> None:
        """A callback by name: append its context to the file in $THEIR_CALLBACK_LOG."""
        with open(os.environ["THEIR_CALLBACK_LOG"], "a") as out:
            out.write(json.dumps(context) + "\n")

    @app.task(name="their_module.sleep", shared=False)
    def sleep(seconds: float) -> float:
        time.sleep(seconds)
        return seconds

    if attach_sluice:
        attach(app)
    return app
