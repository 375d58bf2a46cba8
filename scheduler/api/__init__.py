"""The REST API (`/api/v1`) and the web UI of Sluice, served by `sluice api`.

`create_app(settings)` builds a FastAPI application. Nothing here reads the
environment at import time; the app reads it once, when it is created.
"""

from __future__ import annotations

from sluice.scheduler.api.app import create_app

__all__ = ["create_app"]
