"""The worker's Celery app: `celery -A sluice.broker.worker.app worker -Q sluice.default`.

`create_worker_app` is the publishing app (`sluice.broker.app.create_app`) with the
worker task registered. Nothing reads configuration at import time: the module
attribute `app` (what `celery -A` looks for) is built on first access, for
`Settings.from_env()`.
"""

from __future__ import annotations

from typing import Any

from celery import Celery

from sluice.broker.app import create_app
from sluice.broker.worker.task import register
from sluice.scheduler.core.settings import Settings


def create_worker_app(settings: Settings, *, broker_url: str | None = None) -> Celery:
    """A Celery app for `settings` whose workers run Sluice's task."""
    app = create_app(settings, broker_url=broker_url)
    register(app)
    return app


_lazy_app: Celery | None = None


def __getattr__(name: str) -> Any:
    """`app`: the worker app for `Settings.from_env()`, built on first use (PEP 562)."""
    global _lazy_app
    if name == "app":
        if _lazy_app is None:
            _lazy_app = create_worker_app(Settings.from_env())
        return _lazy_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
