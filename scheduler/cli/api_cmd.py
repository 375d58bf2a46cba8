"""`sluice api [--host 127.0.0.1] [--port 8080]`: serve the REST API and the web UI.

Takes `SLUICE_API_TOKEN`, `SLUICE_API_READ_AUTH`, `SLUICE_TRACE_URL`,
`SLUICE_API_MAX_BODY_BYTES` and `SLUICE_API_DAG_CACHE_BYTES` from the settings (see
`scheduler.api.config`). Waits for a database that does not answer yet (one line per
attempt); fails with one line if the schema is not current. Serving beyond loopback with
open reads is allowed but warned about.
"""

from __future__ import annotations

import argparse
import logging
import signal
from types import FrameType

from sluice.scheduler.cli.context import Cli, CliError

log = logging.getLogger(__name__)

LOOPBACK = {"127.0.0.1", "localhost", "::1"}

SHUTDOWN_GRACE_SECONDS = 5
"""How long a stopped API (SIGTERM) waits for requests in flight before it closes them: a
client that never finishes its request must not keep it alive."""


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("api", help="serve the REST API and the web UI")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="port to listen on (default 8080)")
    p.set_defaults(func=serve)


def serve(cli: Cli, args: argparse.Namespace) -> int:
    import uvicorn

    from sluice.scheduler.api import create_app
    from sluice.scheduler.api.app import settle_heap
    from sluice.scheduler.api.config import ApiConfig

    if not 0 < args.port < 65536:
        raise CliError(f"--port must be between 1 and 65535, got {args.port}")
    config = ApiConfig.from_settings(cli.settings)
    cli.wait_for_database()  # and fail early with one line if the schema is missing
    cli.engine.dispose()
    if config.token is None:
        log.warning("SLUICE_API_TOKEN is not set: the API refuses every write")
    if args.host not in LOOPBACK and not config.read_auth:
        log.warning(
            "serving on %s with reads open to anyone who can connect; "
            "set SLUICE_API_READ_AUTH=1 to require the token for reads",
            args.host,
        )
    app = create_app(cli.settings, config=config)
    settle_heap()
    # uvicorn shuts down gracefully on SIGTERM, then raises the signal again for the handler
    # it found: make that one a no-op so that a stopped API exits 0, like the scheduler.
    signal.signal(signal.SIGTERM, _stopped)
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        log_level="info",
        server_header=False,
        timeout_graceful_shutdown=SHUTDOWN_GRACE_SECONDS,
    )
    return 0


def _stopped(signum: int, frame: FrameType | None) -> None:
    log.info("signal %s: the API has stopped", signum)
