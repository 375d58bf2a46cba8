"""The client is light: importing `sluice.client` loads httpx and the standard library,
nothing of Sluice's server side (no SQLAlchemy, Celery, FastAPI, nor the scheduler)."""

from __future__ import annotations

import json
import subprocess
import sys

SERVER_SIDE = ("sluice.scheduler", "sluice.broker", "celery", "kombu", "sqlalchemy", "fastapi")

PROBE = """
import json, sys
from sluice.client import ApiError, AsyncClient, Client
print(json.dumps(sorted(sys.modules)))
"""


def test_importing_the_client_loads_no_server_side() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=60
    )
    loaded = json.loads(done.stdout)
    assert "httpx" in loaded and "sluice.client.sync" in loaded  # the probe saw the client
    server = [m for m in loaded if m.startswith(SERVER_SIDE)]
    assert server == []
