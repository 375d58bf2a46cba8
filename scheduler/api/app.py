"""The FastAPI application: `/api/v1`, `/openapi.json`, and the web UI at `/`.

Invariants:
- `Settings` and the API's own variables are read once, here, when the app is
  created; one engine serves every request, each with its own session.
- A write is refused without its token (or the UI's login cookie and its CSRF token),
  and a body over SLUICE_API_MAX_BODY_BYTES with 413, before the body is read
  (`guard.RequestGuard`, in front of the app).
- A request's writes are one transaction, committed only once its answer is a success
  ready to send (`deps.db_session`): a request answered with an error commits nothing.
- Every response, errors and static files included, carries nosniff, no referrer and a
  Content-Security-Policy that forbids framing (`headers.SecurityHeaders`, around all).
- The interactive docs pages are off: they load their scripts from a CDN,
  which closed networks cannot reach. The spec is at `/openapi.json`.
"""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

from fastapi import FastAPI
from starlette.types import ASGIApp

from sluice.scheduler.api import (
    health,
    routes_assets,
    routes_dags,
    routes_events,
    routes_pools,
    routes_runs,
    routes_secrets,
    routes_session,
    routes_tasks,
    routes_users,
    routes_versions,
)
from sluice.scheduler.api.config import ApiConfig
from sluice.scheduler.api.errors import install_error_handlers
from sluice.scheduler.api.guard import RequestGuard
from sluice.scheduler.api.headers import SecurityHeaders
from sluice.scheduler.api.state import ApiState
from sluice.scheduler.api.ui import install_ui
from sluice.scheduler.api.views import ShapeCache
from sluice.scheduler.core.db import make_engine, make_session_factory
from sluice.scheduler.core.settings import Settings

API_VERSION = "1"


API_POOL_SIZE = 20
"""Database connections the API keeps (plus 5 more under a burst)."""


class SluiceApi(FastAPI):
    """FastAPI with `SecurityHeaders` around its whole middleware stack: Starlette puts
    its ServerErrorMiddleware, which answers an unexpected error's 500, outside every
    middleware added with `add_middleware`."""

    def build_middleware_stack(self) -> ASGIApp:
        return SecurityHeaders(super().build_middleware_stack())


def create_app(
    settings: Settings | None = None,
    *,
    config: ApiConfig | None = None,
    env: Mapping[str, str] | None = None,
) -> FastAPI:
    """The API and UI for `settings` (default: from the environment, or from `env`)."""
    settings = settings if settings is not None else Settings.from_env(env)
    config = config if config is not None else ApiConfig.from_settings(settings)
    # routes run in a thread pool: 20 requests at once (a burst of triggers) each get a
    # connection without waiting (with 5, a quarter of a trigger was that wait: W3API)
    engine = make_engine(
        settings.database_url,
        pool_size=API_POOL_SIZE,
        application_name="sluice-api",
        idle_in_transaction_timeout=settings.db_idle_in_tx_timeout,
    )
    state = ApiState(
        settings=settings,
        config=config,
        engine=engine,
        factory=make_session_factory(engine),
        shapes=ShapeCache(config.dag_cache_bytes),
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        state.close()

    app = SluiceApi(
        title="Sluice",
        version=API_VERSION,
        description="DAG runs, task instances and their logs. Writes need a bearer token.",
        docs_url=None,
        redoc_url=None,
        openapi_url="/openapi.json",
        lifespan=lifespan,
    )
    app.state.sluice = state
    app.add_middleware(
        RequestGuard, config=config, lookup=state.lookup_token, sessions=state.lookup_session
    )
    install_error_handlers(app)
    for module in (
        health,
        routes_dags,
        routes_runs,
        routes_tasks,
        routes_versions,
        routes_events,
        routes_assets,
        routes_pools,
        routes_users,
        routes_session,
        routes_secrets,
    ):
        app.include_router(module.router)
    install_ui(app)
    return app


def settle_heap() -> None:
    """Take what exists now (the modules, the app) out of the garbage collector's view
    (`gc.collect()`, then `gc.freeze()`, as servers do once their app is loaded), so that
    a full collection walks only what requests made. A 10,000-task DAG's grid makes about
    as many objects a request; with the whole process in view, the full collections they
    set off took about 100 ms each, every other request. Call it once, before serving."""
    gc.collect()
    gc.freeze()
