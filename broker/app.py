"""The Celery app factory: the app schedulers, backfills and the API publish through.

Invariants: JSON only on the wire; late acks with prefetch 1, so a message is
removed from the broker only after its task returned (a duplicate is harmless:
the worker's compare-and-set on `attempt_id` makes it a no-op); no result backend
(results live in the database); on Redis, Sluice's transport (`broker.redis_transport`),
which drops what a queue holds that is not a message. This app has no task registered:
publishing needs none, and the worker's runtime stays out of the processes that only
publish. A worker's app is this one with the worker task registered
(`sluice.broker.worker.app`).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

from celery import Celery

from sluice.broker.kombu_fixes import reuse_redis_clients
from sluice.broker.queues import DEFAULT_QUEUE, celery_queue
from sluice.broker.redis_transport import transport_for
from sluice.scheduler.core.settings import Settings

VISIBILITY_TIMEOUT = 3600
"""Seconds before Redis gives an unacknowledged message to another worker."""

VIRTUAL_POLLING_INTERVAL = 0.05
"""Seconds between polls of polling transports (memory://, filesystem://)."""


def transport_options(broker_url: str) -> dict[str, Any]:
    """Transport options for `broker_url`.

    Redis blocks on BRPOP, where `polling_interval` would become the BRPOP timeout:
    it gets only the visibility timeout.
    """
    scheme = urlparse(broker_url).scheme
    if scheme in ("redis", "rediss", "sentinel"):
        return {"visibility_timeout": VISIBILITY_TIMEOUT}
    return {"polling_interval": VIRTUAL_POLLING_INTERVAL}


def create_app(settings: Settings, *, broker_url: str | None = None) -> Celery:
    """A Celery app for `settings` to publish through (no task registered).

    `broker_url` overrides `settings.broker_url` (the embedded broker uses memory://).
    The settings are kept on `app.conf.sluice_settings` (see `settings_of`).
    """
    reuse_redis_clients()  # Sluice's own processes only: an attached app keeps kombu's way
    url = broker_url or settings.broker_url
    app = Celery("sluice", broker=url, set_as_current=False)
    transport, use_ssl = transport_for(url)  # Redis: junk on a queue is dropped, not fatal
    if transport is not None:
        app.conf.update(broker_transport=transport, broker_use_ssl=use_ssl)
    app.conf.update(
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        event_serializer="json",
        result_backend=None,
        task_ignore_result=True,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        broker_connection_retry_on_startup=True,
        broker_transport_options=transport_options(url),
        task_default_queue=celery_queue(settings.namespace, DEFAULT_QUEUE),
        task_create_missing_queues=True,
        task_send_sent_event=False,
        worker_send_task_events=False,
        enable_utc=True,
        timezone="UTC",
        sluice_settings=settings,
    )
    return app


def settings_of(app: Celery) -> Settings:
    """The Sluice settings an app was created with."""
    settings = app.conf.get("sluice_settings")
    if not isinstance(settings, Settings):
        raise RuntimeError("this Celery app was not made by sluice.broker.app.create_app")
    return settings
