"""The client's errors, without a server (`httpx.MockTransport`): every non-2xx answer is
an `ApiError` with its status and the server's one-line message, whatever the body; a
body over the bound is refused without being read; a 2xx not in the API's shape is an
`InvalidResponse`. The sync and the async client answer alike."""

from __future__ import annotations

import asyncio
import json
import pickle
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from sluice.client import ApiError, AsyncClient, Client, InvalidResponse, ResponseTooLarge

URL = "http://sluice.test"

Handler = Callable[[httpx.Request], httpx.Response]


def sync_call(handler: Handler, **options: Any) -> Any:
    with Client(URL, token="t", transport=httpx.MockTransport(handler), **options) as c:
        return c.run("etl", "r1")


def async_call(handler: Handler, **options: Any) -> Any:
    async def main() -> Any:
        transport = httpx.MockTransport(handler)
        async with AsyncClient(URL, token="t", transport=transport, **options) as c:
            return await c.run("etl", "r1")

    return asyncio.run(main())


CALLS = [pytest.param(sync_call, id="sync"), pytest.param(async_call, id="async")]


def answer(status: int, body: Any = None, **kwargs: Any) -> Handler:
    def handle(request: httpx.Request) -> httpx.Response:
        if body is None or isinstance(body, bytes):
            return httpx.Response(status, content=body or b"", **kwargs)
        return httpx.Response(status, json=body, **kwargs)

    return handle


@pytest.mark.parametrize("call", CALLS)
@pytest.mark.parametrize(
    ("status", "body", "message"),
    [
        (
            409,
            {"detail": "run 'r1' of DAG 'etl' already exists"},
            "run 'r1' of DAG 'etl' already exists",
        ),
        (404, {"detail": "no DAG 'etl'"}, "no DAG 'etl'"),
        (401, {"detail": "the bearer token is not valid"}, "the bearer token is not valid"),
        (500, {"detail": "internal error"}, "internal error"),
        # a detail over several lines is one line
        (422, {"detail": "conf:\n  'day'  is\trequired"}, "conf: 'day' is required"),
        # FastAPI's own shape: a list of errors, joined on one line
        (
            422,
            {
                "detail": [
                    {"loc": ["body", "conf"], "msg": "Input should be a valid dictionary"},
                    {
                        "loc": ["query", "limit"],
                        "msg": "Input should be less than or equal\nto 500",
                    },
                ]
            },
            "body.conf: Input should be a valid dictionary; "
            "query.limit: Input should be less than or equal to 500",
        ),
        (422, {"detail": ["first", "second"]}, "first; second"),
        (400, {"detail": {"why": "odd"}}, '{"why":"odd"}'),
        # a proxy's page: its first line that says something
        (502, b"\n<html>Bad gateway\n</html>\n", "<html>Bad gateway"),
        (503, b"", "Service Unavailable"),
        (418, {"something": "else"}, "I'm a teapot"),
        (500, b"\xff\xfe not utf-8", "\ufffd\ufffd not utf-8"),
    ],
)
def test_a_non_2xx_answer_is_an_api_error_with_one_line(
    call: Callable[..., Any], status: int, body: Any, message: str
) -> None:
    with pytest.raises(ApiError) as raised:
        call(answer(status, body))
    assert type(raised.value) is ApiError
    assert raised.value.status == status
    assert raised.value.message == message
    assert "\n" not in str(raised.value) and str(raised.value) == f"{status}: {message}"


@pytest.mark.parametrize("call", CALLS)
def test_a_long_message_is_cut_to_one_short_line(call: Callable[..., Any]) -> None:
    with pytest.raises(ApiError) as raised:
        call(answer(400, {"detail": "word " * 500}))
    assert len(raised.value.message) == 300 and raised.value.message.endswith("...")


class Endless(httpx.SyncByteStream, httpx.AsyncByteStream):
    """A body without a length that never ends; counts the chunks read of it."""

    def __init__(self) -> None:
        self.read = 0

    def __iter__(self) -> Iterator[bytes]:
        while True:
            self.read += 1
            yield b"x" * 1024

    async def __aiter__(self) -> Any:
        while True:
            self.read += 1
            yield b"x" * 1024


@pytest.mark.parametrize("call", CALLS)
def test_a_body_announced_over_the_bound_is_refused_unread(call: Callable[..., Any]) -> None:
    body = Endless()
    with pytest.raises(ResponseTooLarge) as raised:
        call(
            lambda request: httpx.Response(200, headers={"Content-Length": "5000"}, stream=body),
            max_response_bytes=4096,
        )
    assert raised.value.status == 200 and "4096 bytes" in raised.value.message
    assert isinstance(raised.value, ApiError)
    assert body.read == 0


@pytest.mark.parametrize("call", CALLS)
@pytest.mark.parametrize("status", [200, 500])
def test_an_endless_body_is_read_only_up_to_the_bound(
    call: Callable[..., Any], status: int
) -> None:
    body = Endless()
    with pytest.raises(ResponseTooLarge) as raised:
        call(lambda request: httpx.Response(status, stream=body), max_response_bytes=10_000)
    assert raised.value.status == status
    assert body.read == 10  # the chunk that passed the bound was the last one read


@pytest.mark.parametrize("call", CALLS)
@pytest.mark.parametrize(
    ("body", "said"),
    [
        (b"<html>ok</html>", "the answer is not JSON"),
        (b"[1, 2]", "the answer is not a JSON object"),
        (json.dumps({"dag_id": "etl"}).encode(), "the answer has no field 'run_id'"),
        (
            json.dumps(
                {
                    "dag_id": "etl",
                    "run_id": "r1",
                    "state": "queued",
                    "run_type": "manual",
                    "logical_date": "yesterday",
                }
            ).encode(),
            "the answer has a field of the wrong shape",
        ),
        (
            json.dumps(
                {"dag_id": "etl", "run_id": 1, "state": "queued", "run_type": "manual"}
            ).encode(),
            "run_id is not a string",
        ),
    ],
)
def test_a_2xx_that_is_not_the_apis_shape_is_an_invalid_response(
    call: Callable[..., Any], body: bytes, said: str
) -> None:
    with pytest.raises(InvalidResponse) as raised:
        call(answer(200, body))
    assert raised.value.status == 200 and said in raised.value.message


def test_a_network_error_stays_httpxs() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with pytest.raises(httpx.ConnectError):
        sync_call(refuse)


def test_an_api_error_survives_pickling() -> None:
    """A script that hands errors across processes (multiprocessing, a Celery result)."""
    for error in (ApiError(409, "exists"), ResponseTooLarge(200, "big")):
        copy = pickle.loads(pickle.dumps(error))
        assert type(copy) is type(error)
        assert (copy.status, copy.message, str(copy)) == (error.status, error.message, str(error))
