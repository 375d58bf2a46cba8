"""Which Celery workers serve which Sluice queue, asked of the workers themselves.

Uses Celery's remote control (`inspect().active_queues()`, a broadcast over the
broker that live workers answer within `timeout`). Celery queue names
`<namespace>.<queue>` are mapped back to Sluice queue names; queues of other
namespaces (or of a Celery app Sluice shares a broker with) are left out.

Invariants: reads nothing from and writes nothing to the database; never
raises for a broker that is down or slow: the answer is then empty and carries
a `note` saying why. Workers started with `--without-mingle --without-gossip`
still answer remote control (only `--without-heartbeat` is irrelevant here). The SQLite
database of `sluice standalone` (`standalone_database`) has no broker to ask: its
callers do not ask, rather than ping the default Redis on localhost.
"""

from __future__ import annotations

import logging
from typing import Any

from sluice.scheduler.core.settings import Settings

log = logging.getLogger(__name__)


class WorkerMap(dict[str, list[str]]):
    """Sluice queue → sorted names of the workers consuming it; `note` says what went wrong."""

    note: str | None = None

    @classmethod
    def failed(cls, note: str) -> WorkerMap:
        found = cls()
        found.note = note
        return found


def map_active_queues(reply: dict[str, Any] | None, namespace: str) -> WorkerMap:
    """Turn `active_queues()`'s {worker: [{"name": …}, …]} into Sluice queue → workers."""
    found = WorkerMap()
    prefix = f"{namespace}."
    for worker, queues in (reply or {}).items():
        for queue in queues or []:
            name = queue.get("name", "") if isinstance(queue, dict) else ""
            if name.startswith(prefix) and len(name) > len(prefix):
                found.setdefault(name[len(prefix) :], []).append(worker)
    for workers in found.values():
        workers.sort()
    return found


STANDALONE_NOTE = (
    "no broker asked: a SQLite database without SLUICE_BROKER_URL is sluice standalone's, "
    "whose embedded broker and worker live in its own process"
)


def standalone_database(settings: Settings) -> bool:
    """Whether `settings` name `sluice standalone`'s world: a SQLite database and no
    broker given (its broker is in-memory, inside the standalone process): asking the
    default broker (Redis on localhost, db 0) would ask someone else's."""
    return settings.database_url.startswith("sqlite") and not settings.broker_url_set


def workers_by_queue(settings: Settings, timeout: float = 1.0) -> WorkerMap:
    """Ask the live workers which queues they consume; takes about `timeout` seconds.

    A broker that cannot be reached gives an empty map with a `note` (at once:
    one connection attempt, no retries). No reply at all means no live worker.
    """
    if settings.embedded_broker:
        return WorkerMap.failed("the embedded broker's workers live in their own process")
    from sluice.broker.app import create_app  # Celery is imported only to ask

    app = create_app(settings)
    # Replies are collected with BRPOP, which blocks `polling_interval` (1 s by default)
    # per poll: poll faster, so the call takes about `timeout`, not a second more.
    options = dict(app.conf.broker_transport_options or {})
    options["polling_interval"] = min(0.1, timeout)
    app.conf.broker_transport_options = options
    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(
                max_retries=1, interval_start=0, interval_step=0, timeout=timeout
            )
            reply = app.control.inspect(timeout=timeout, connection=conn).active_queues()
    except Exception as exc:  # broker down, refused, timed out: report, never fail
        note = f"could not ask the workers through the broker: {exc}"
        log.info(note)
        return WorkerMap.failed(note)
    finally:
        app.close()
    return map_active_queues(reply, settings.namespace)
