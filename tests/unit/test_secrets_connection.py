"""`sluice.Connection` and `sluice.Variable` as a task or a test uses them: URIs both
ways, the repr that never shows a password, the bounds, and the environment read when no
worker installed a resolver."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

import sluice
from sluice.tasks.secrets import (
    NAME_MAX,
    VALUE_MAX_BYTES,
    Connection,
    ConnectionNotFound,
    SecretInputError,
    Variable,
    VariableNotFound,
    check_name,
    current_resolver,
    install_resolver,
)


def test_a_uri_gives_every_field_percent_decoded() -> None:
    conn = Connection.from_uri(
        "postgresql+psycopg://etl%40corp:p%40ss%2Fw%3Ard@db.example:6432/ware%20house"
        "?sslmode=require&application_name=sluice"
    )
    assert conn == Connection(
        conn_type="postgresql+psycopg",
        host="db.example",
        port=6432,
        login="etl@corp",
        password="p@ss/w:rd",
        schema="ware house",
        extra={"sslmode": "require", "application_name": "sluice"},
    )
    assert Connection.from_uri(conn.uri) == conn


def test_parts_may_be_left_out() -> None:
    assert Connection.from_uri("redis://cache") == Connection(conn_type="redis", host="cache")
    assert Connection.from_uri("sqlite:///data/db") == Connection(
        conn_type="sqlite", schema="data/db"
    )
    assert Connection.from_uri("http://user@api:8080") == Connection(
        conn_type="http", host="api", port=8080, login="user"
    )
    assert Connection.from_uri("//[::1]:5432") == Connection(host="::1", port=5432)
    assert Connection(host="::1", port=5432).uri == "//[::1]:5432"
    assert Connection.from_uri("s3://?__extra__=%7B%22n%22%3A%201%7D").extra == {"n": 1}


def test_the_uri_keeps_extras_that_are_not_text_as_json() -> None:
    conn = Connection(conn_type="http", host="h", extra={"retries": 3, "tls": {"verify": False}})
    assert "__extra__=" in conn.uri
    assert Connection.from_uri(conn.uri) == conn


_TEXT = st.text(st.characters(blacklist_categories=("Cc", "Cs")), min_size=1, max_size=30)
_HOST = st.from_regex(r"[a-z0-9]([a-z0-9.\-]{0,20}[a-z0-9])?", fullmatch=True)


@given(
    conn_type=st.one_of(st.none(), st.from_regex(r"[a-z][a-z0-9+.\-]{0,15}", fullmatch=True)),
    host=st.one_of(st.none(), _HOST),
    port=st.one_of(st.none(), st.integers(1, 65535)),
    login=st.one_of(st.none(), _TEXT),
    password=st.one_of(st.none(), _TEXT),
    schema=st.one_of(st.none(), _TEXT),
    extra=st.dictionaries(_TEXT, st.one_of(_TEXT, st.integers()), max_size=3),
)
def test_every_connection_reads_back_from_its_uri(
    conn_type: str | None,
    host: str | None,
    port: int | None,
    login: str | None,
    password: str | None,
    schema: str | None,
    extra: dict[str, object],
) -> None:
    conn = Connection(conn_type, host, port, login, password, schema, extra)
    assert Connection.from_uri(conn.uri) == conn
    assert Connection.from_dict(conn.as_dict()) == conn


def test_the_repr_never_shows_the_password() -> None:
    conn = Connection.from_uri("postgresql://me:hunter2secret@db/wh")
    assert "hunter2secret" not in repr(conn) and "hunter2secret" not in str(conn)
    assert "password='***'" in repr(conn) and "login='me'" in repr(conn)
    assert "password=None" in repr(Connection(host="h"))


@pytest.mark.parametrize(
    ("uri", "needle"),
    [
        ("db.example:5432", "type://login:password@host:port/schema"),
        ("1abc://host", "URI scheme"),
        ("postgresql://h:99999/x", "port must be a number from 1 to 65535"),
        ("postgresql://h:0", "port must be a number from 1 to 65535"),
        ("postgresql://h:pg/x", "port must be a number"),
        ("postgresql://me:pa#ss@h", "percent-encode it (%23)"),
        ("postgresql://me:pass@h/db\n", "control characters"),
        ("postgresql://me:pa\x1b[2Jss@h", "control characters"),
        ("postgresql://[::1/x", "host"),
        ("http://h?__extra__=[1]", "JSON object"),
        ("http://h?__extra__=nope", "must be JSON"),
        ("http://h/" + "x" * VALUE_MAX_BYTES, f"at most {VALUE_MAX_BYTES} bytes"),
    ],
)
def test_a_bad_uri_is_one_line_without_the_uri(uri: str, needle: str) -> None:
    with pytest.raises(SecretInputError) as caught:
        Connection.from_uri(uri)
    line = str(caught.value)
    assert needle in line and "\n" not in line
    assert "pa#ss" not in line and "pa\x1b" not in line  # a password is never echoed


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"host": "h", "pasword": "x"}, "no field 'pasword'"),
        ({"port": "5432"}, "port must be a whole number"),
        ({"port": True}, "port must be a whole number"),
        ({"port": 70000}, "port must be a whole number from 1 to 65535"),
        ({"host": 5}, "host must be text"),
        ({"extra": [1]}, "extra must be a JSON object"),
        ({"conn_type": "no spaces"}, "URI scheme"),
        ([1, 2], "must be a JSON object"),
    ],
)
def test_a_bad_json_connection_names_what_is_wrong(data: object, needle: str) -> None:
    with pytest.raises(SecretInputError, match=needle):
        Connection.from_dict(data)


@pytest.mark.parametrize(
    ("name", "needle"),
    [
        ("", "non-empty"),
        ("x" * (NAME_MAX + 1), f"at most {NAME_MAX} characters"),
        (" padded", "spaces"),
        ("a\x00b", "control characters"),
        ("a\x1b[31mb", "control characters"),
        ("a\x85b", "control characters"),
        ("\ud800", "UTF-8"),
    ],
)
def test_names_are_bounded(name: str, needle: str) -> None:
    with pytest.raises(SecretInputError, match=needle):
        check_name(name)
    with pytest.raises(SecretInputError, match=needle):
        Connection.get(name)
    with pytest.raises(SecretInputError, match=needle):
        Variable.get(name, default=None)
    assert check_name("x" * NAME_MAX) == "x" * NAME_MAX


@pytest.fixture
def outside_a_worker() -> Iterator[None]:
    """No resolver installed (a worker run in this process before installs its own)."""
    previous = install_resolver(None)
    yield
    install_resolver(previous)


def test_outside_a_worker_the_environment_is_read(
    monkeypatch: pytest.MonkeyPatch, outside_a_worker: None
) -> None:
    assert current_resolver() is None
    monkeypatch.setenv("SLUICE_CONN_WAREHOUSE", "postgresql://me:pw@db:5432/wh")
    monkeypatch.setenv("SLUICE_VAR_REGION", "eu-west-1")
    monkeypatch.setenv("SLUICE_VAR_EMPTY", "")
    assert sluice.Connection.get("warehouse").host == "db"
    assert sluice.Variable.get("region") == "eu-west-1"
    assert sluice.Variable.get("empty") == ""  # set, if empty
    assert sluice.Variable.get("missing", default=None) is None
    with pytest.raises(ConnectionNotFound) as conn_missing:
        sluice.Connection.get("other")
    assert str(conn_missing.value) == (
        "no connection 'other': SLUICE_CONN_OTHER is not set (outside a worker only the "
        "environment is read)"
    )
    with pytest.raises(VariableNotFound, match="no variable 'missing': SLUICE_VAR_MISSING"):
        sluice.Variable.get("missing")
    with pytest.raises(KeyError):  # a KeyError, as a mapping's missing key
        sluice.Variable.get("missing")
