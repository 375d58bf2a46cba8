"""What the app holds for its lifetime: settings, one engine and its session factory.

Invariant: built once per app by `create_app`; every request gets its own session
from `factory` (`deps.db_session`: committed on a success, else rolled back). What is
cached (`shapes`) is keyed by DAG version, so it never goes stale.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from sluice.scheduler.api.config import ApiConfig
from sluice.scheduler.api.views import ShapeCache
from sluice.scheduler.core.db import transaction, utcnow
from sluice.scheduler.core.queries.ui_sessions import FoundSession, find_session
from sluice.scheduler.core.queries.users import Identity, identity_of_token
from sluice.scheduler.core.settings import Settings


@dataclass
class ApiState:
    settings: Settings
    config: ApiConfig
    engine: Engine
    factory: sessionmaker[Session]
    shapes: ShapeCache = field(default_factory=lambda: ShapeCache(ApiConfig().dag_cache_bytes))
    """Each DAG version's task order and task list (built once per version)."""
    celery: Any = field(default=None)
    """The Celery app used to ask workers who they are (built on first use)."""
    inspector: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(2, thread_name_prefix="sluice-api-health")
    )
    """Where workers are asked, so that a stuck broker call never holds a request."""

    def lookup_token(self, token: str) -> Identity | None:
        """Whose valid token `token` is (one short transaction; blocking)."""
        with transaction(self.factory) as session:
            return identity_of_token(session, token, utcnow())

    def lookup_session(self, session_id: str) -> FoundSession | None:
        """The live web UI session of the cookie value `session_id` (one short read;
        blocking)."""
        with transaction(self.factory) as session:
            return find_session(session, session_id, utcnow())

    def close(self) -> None:
        self.inspector.shutdown(wait=False, cancel_futures=True)
        self.engine.dispose()
