"""Request bodies are refused before they are read: without the token (401/403), or over
SLUICE_API_MAX_BODY_BYTES (413), in front of FastAPI, which would read and parse them.

The TestClient hands the app a whole body at once, so the streamed (chunked) case is
also run against a real server, `sluice api`, over a socket.
"""

from __future__ import annotations

import signal
import socket
import time
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text

from sluice.scheduler.api.config import MAX_BODY_BYTES, ApiConfig
from sluice.scheduler.cli.api_cmd import SHUTDOWN_GRACE_SECONDS
from sluice.scheduler.core.settings import ConfigError, Settings
from tests.api.conftest import AUTH, TOKEN, client_for
from tests.procs import Sluice, wait_until

V1 = "/api/v1"
JSON = {"Content-Type": "application/json"}
LIMIT = 4096

WRITES = [
    ("post", "/dags/demo/runs"),
    ("patch", "/dags/demo"),
    ("post", "/dags/demo/runs/r1/tasks/extract/clear"),
]


def count_runs(url: str) -> int:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(text("SELECT count(*) FROM dag_run")).scalar_one())
    finally:
        engine.dispose()


@pytest.fixture
def small(settings: Settings) -> Iterator[TestClient]:
    """The API with a token and a body limit of LIMIT bytes."""
    yield from client_for(settings, ApiConfig(token=TOKEN, max_body_bytes=LIMIT))


def test_the_token_is_checked_before_the_body_is_parsed(client: TestClient) -> None:
    for method, path in WRITES:
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            response = client.request(
                method, V1 + path, content=b"{not json", headers={**JSON, **headers}
            )
            assert response.status_code == 401, (method, path, response.text)
            assert response.headers["WWW-Authenticate"] == "Bearer"
            assert "\n" not in response.json()["detail"]
    assert client.get(f"{V1}/dags/demo/runs").json()["total"] == 0
    assert (
        client.post(f"{V1}/dags/demo/runs", json={"run_id": "ok"}, headers=AUTH).status_code == 201
    )


def test_without_a_token_configured_a_body_is_refused_unread(settings: Settings) -> None:
    for client in client_for(settings, ApiConfig(token=None)):
        response = client.post(f"{V1}/dags/demo/runs", content=b"{not json", headers=JSON)
        assert response.status_code == 401 and "SLUICE_API_TOKEN" in response.json()["detail"]


def test_a_body_over_the_limit_is_413_and_writes_nothing(
    small: TestClient, settings: Settings
) -> None:
    padding = "x" * LIMIT
    response = small.post(
        f"{V1}/dags/demo/runs", json={"run_id": "big", "conf": {"p": padding}}, headers=AUTH
    )

    assert response.status_code == 413, response.text
    assert response.json() == {
        "detail": f"the request body is over {LIMIT} bytes, the API's SLUICE_API_MAX_BODY_BYTES"
    }
    assert count_runs(settings.database_url) == 0
    ok = small.post(f"{V1}/dags/demo/runs", json={"run_id": "small"}, headers=AUTH)
    assert ok.status_code == 201 and small.get(f"{V1}/dags/demo/runs").json()["total"] == 1


def test_a_chunked_body_over_the_limit_is_413(small: TestClient, settings: Settings) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"run_id": "chunked", "conf": {"p": "'
        for _ in range(LIMIT // 512 + 1):
            yield b"y" * 512
        yield b'"}}'

    response = small.post(f"{V1}/dags/demo/runs", content=chunks(), headers={**AUTH, **JSON})

    assert response.status_code == 413, response.text
    assert count_runs(settings.database_url) == 0
    within = small.post(
        f"{V1}/dags/demo/runs",
        content=iter([b'{"run_id": ', b'"chunked-ok"}']),
        headers={**AUTH, **JSON},
    )
    assert within.status_code == 201, within.text


def test_the_default_limit_is_1_mib(client: TestClient, settings: Settings) -> None:
    body = b'{"run_id": "huge", "conf": {"p": "' + b"z" * MAX_BODY_BYTES + b'"}}'
    response = client.post(f"{V1}/dags/demo/runs", content=body, headers={**AUTH, **JSON})
    assert response.status_code == 413
    assert count_runs(settings.database_url) == 0


def test_a_content_length_that_is_no_number_is_400_on_any_route(client: TestClient) -> None:
    # a GET too: the guard answers before any route, and every route documents it
    response = client.get(f"{V1}/dags/demo/runs/r1/tasks/extract", headers={"Content-Length": ""})
    assert response.status_code == 400, response.text
    assert response.json() == {"detail": "the Content-Length header is not a number of bytes"}
    spec = client.get("/openapi.json").json()
    for path, methods in spec["paths"].items():
        if path.startswith(V1):
            for method, operation in methods.items():
                assert {"400", "413"} <= set(operation["responses"]), (method, path)


def test_max_body_bytes_from_the_environment() -> None:
    assert ApiConfig.from_env({}).max_body_bytes == 1_048_576
    assert ApiConfig.from_env({"SLUICE_API_MAX_BODY_BYTES": "2048"}).max_body_bytes == 2048
    for bad in ("0", "-1", "1MB"):
        with pytest.raises(ConfigError, match="SLUICE_API_MAX_BODY_BYTES"):
            ApiConfig.from_env({"SLUICE_API_MAX_BODY_BYTES": bad})


# -- a real server ----------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _answer(port: int, head: str, body: bytes = b"") -> str:
    """The status line the server answers to `head` (and `body`), within 10 seconds,
    though the request is never finished."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head.encode() + b"\r\n" + body)
        received = b""
        while b"\r\n" not in received:
            data = sock.recv(4096)
            if not data:
                break
            received += data
    return received.split(b"\r\n", 1)[0].decode()


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def test_a_real_server_refuses_streamed_bodies_before_reading_them(sluice: Sluice) -> None:
    port = _free_port()
    sluice.extra_env.update(SLUICE_API_TOKEN=TOKEN, SLUICE_API_MAX_BODY_BYTES=str(LIMIT))
    proc = sluice.start("api", "api", "--port", str(port))
    wait_until(lambda: proc.poll() is not None or _up(port), timeout=30)
    assert proc.poll() is None, sluice.logs()
    post = f"POST {V1}/dags/demo/runs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    chunked = "Transfer-Encoding: chunked\r\n"
    token = f"Authorization: Bearer {TOKEN}\r\n"

    started = time.monotonic()
    no_token = _answer(port, post + chunked, _chunk(b'{"run_id": "'))
    announced = _answer(port, post + token + "Content-Length: 125829120\r\n")
    over = b"".join(_chunk(b"w" * 1024) for _ in range(LIMIT // 1024 + 1))
    streamed = _answer(port, post + token + chunked, over)

    assert no_token.split()[1] == "401", no_token
    assert announced.split()[1] == "413", announced
    assert streamed.split()[1] == "413", streamed
    assert time.monotonic() - started < 10  # each answered without waiting for the rest
    assert _up(port) and count_runs(sluice.database_url) == 0
    sluice.stop(proc)
    assert proc.returncode == 0, sluice.logs()


def _up(port: int) -> bool:
    try:
        return _answer(port, f"GET {V1}/dags HTTP/1.1\r\nHost: x\r\n").split()[1] == "200"
    except OSError:
        return False


def test_sigterm_stops_the_api_during_a_request_that_never_ends(sluice: Sluice) -> None:
    """A client that never finishes its body does not keep a stopped API alive: SIGTERM
    ends it within the API's grace period (uvicorn waited for the request forever)."""
    port = _free_port()
    sluice.extra_env.update(SLUICE_API_TOKEN=TOKEN)
    proc = sluice.start("api", "api", "--port", str(port))
    wait_until(lambda: proc.poll() is not None or _up(port), timeout=30)
    assert proc.poll() is None, sluice.logs()
    head = (
        f"POST {V1}/dags/demo/runs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {TOKEN}\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=30) as stalled:
        stalled.sendall(head.encode() + _chunk(b'{"run_id": "'))  # and nothing more
        assert _up(port)  # a full round trip on another connection: the first is in
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=SHUTDOWN_GRACE_SECONDS + 10)
        assert time.monotonic() - started < SHUTDOWN_GRACE_SECONDS + 10
    assert proc.returncode == 0, sluice.logs()
