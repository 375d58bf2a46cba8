"""`sluice api` as a real process: it serves the API and the UI, and stops on SIGTERM."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request

from tests.procs import Sluice, wait_until

# `sluice api` through its own parser, as scheduler.cli.main dispatches it.
API_MAIN = textwrap.dedent(
    """
    import argparse, sys
    from sluice.scheduler.cli import api_cmd
    from sluice.scheduler.cli.context import Cli
    from sluice.scheduler.core.settings import Settings

    parser = argparse.ArgumentParser()
    api_cmd.add_parsers(parser.add_subparsers())
    args = parser.parse_args(sys.argv[1:])
    sys.exit(args.func(Cli(Settings.from_env(), role="api"), args))
    """
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return 0, ""


def test_sluice_api_serves_and_stops(sluice: Sluice) -> None:
    port = free_port()
    sluice.extra_env["SLUICE_API_TOKEN"] = "s3cret"
    proc = subprocess.Popen(
        [sys.executable, "-c", API_MAIN, "api", "--port", str(port)],
        env=sluice.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        wait_until(lambda: get(base + "/api/v1/dags")[0] == 200, timeout=20)
        assert json.loads(get(base + "/api/v1/dags")[1]) == {"dags": [], "import_errors": []}
        status, page = get(base + "/")
        assert status == 200 and "<title>DAGs · Sluice</title>" in page
        assert get(base + "/openapi.json")[0] == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=15)
    assert proc.returncode == 0, out.decode()
    assert "s3cret" not in out.decode()


def test_sluice_api_rejects_a_bad_port(sluice: Sluice) -> None:
    from sluice.scheduler.cli.context import CliError

    done = subprocess.run(
        [sys.executable, "-c", API_MAIN, "api", "--port", "70000"],
        env=sluice.env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode != 0
    assert CliError.__name__ in done.stderr and "--port must be between 1 and 65535" in done.stderr
