"""`/api/v1/connections` and `/api/v1/variables`: an admin's only (a viewer and an
operator get 403, no one 401); stored encrypted; no answer holds a connection's password
or a secret variable's value; without SLUICE_FERNET_KEY nothing is stored (409)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from cryptography.fernet import Fernet
from fastapi.testclient import TestClient

from sluice.scheduler.api.config import ApiConfig
from sluice.scheduler.core.roles import Role
from sluice.scheduler.core.settings import Settings
from tests.api.conftest import AUTH, TOKEN, client_for
from tests.api.people import add_user
from tests.integration.test_cancel_run import rows

V1 = "/api/v1"
PASSWORD = "pa55-w0rd-of-the-db"
URI = f"postgresql://app:{PASSWORD}@db.internal:5432/sales?sslmode=require"


@pytest.fixture
def keyed(settings: Settings) -> Settings:
    return settings.model_copy(update={"fernet_key": (Fernet.generate_key().decode(),)})


@pytest.fixture
def admin_client(keyed: Settings) -> Iterator[TestClient]:
    yield from client_for(keyed, ApiConfig(token=TOKEN))


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_only_an_admin_manages_them(admin_client: TestClient, keyed: Settings) -> None:
    url = keyed.database_url
    viewer = _bearer(add_user(url, "vera", Role.VIEWER))
    operator = _bearer(add_user(url, "otto", Role.OPERATOR))
    admin = _bearer(add_user(url, "ada", Role.ADMIN))
    calls = [
        ("GET", "/connections", None),
        ("GET", "/connections/c1", None),
        ("POST", "/connections", {"name": "c1", "uri": URI}),
        ("DELETE", "/connections/c1", None),
        ("GET", "/variables", None),
        ("GET", "/variables/v1", None),
        ("PUT", "/variables/v1", {"value": "x"}),
        ("DELETE", "/variables/v1", None),
    ]
    for method, path, body in calls:
        assert admin_client.request(method, V1 + path, json=body).status_code == 401, path
        for who in (viewer, operator):
            answer = admin_client.request(method, V1 + path, json=body, headers=who)
            assert answer.status_code == 403, (method, path, answer.text)
    assert rows(url, "SELECT name FROM connection") == []
    assert rows(url, "SELECT key FROM variable") == []
    assert admin_client.get(f"{V1}/connections", headers=admin).json() == {"connections": []}
    assert admin_client.get(f"{V1}/variables", headers=admin).status_code == 200


def test_connections_never_show_a_password(
    admin_client: TestClient, keyed: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="sluice.scheduler.api.audit")
    admin = _bearer(add_user(keyed.database_url, "ada", Role.ADMIN))
    made = admin_client.post(f"{V1}/connections", json={"name": "sales", "uri": URI}, headers=admin)
    assert made.status_code == 201, made.text
    expected = {
        "name": "sales",
        "conn_type": "postgresql",
        "host": "db.internal",
        "port": 5432,
        "login": "app",
        "password": "***",
        "schema": "sales",
    }
    assert made.json() == expected
    fields = {"conn_type": "http", "host": "api.example", "password": "tok-123", "extra": {"k": 1}}
    by_fields = admin_client.post(
        f"{V1}/connections", json={"name": "http1", "connection": fields}, headers=AUTH
    )
    assert by_fields.status_code == 201 and by_fields.json()["password"] == "***"
    listed = admin_client.get(f"{V1}/connections", headers=admin)
    one = admin_client.get(f"{V1}/connections/sales", headers=admin)
    assert listed.json()["connections"][1] == expected and one.json() == expected
    for answer in (made, by_fields, listed, one):
        assert PASSWORD not in answer.text and "tok-123" not in answer.text
    stored = str(rows(keyed.database_url, "SELECT * FROM connection"))
    assert PASSWORD not in stored and "db.internal" not in stored  # encrypted
    # refused: taken, both forms or neither, a bad URI, a bad name, an unknown field
    for body, status in (
        ({"name": "sales", "uri": URI}, 409),
        ({"name": "x", "uri": URI, "connection": fields}, 422),
        ({"name": "x"}, 422),
        ({"name": "x", "uri": "no scheme here"}, 422),
        ({"name": " x", "uri": URI}, 422),
        ({"name": "x", "connection": {"passwd": "p"}}, 422),
    ):
        answer = admin_client.post(f"{V1}/connections", json=body, headers=admin)
        assert answer.status_code == status, (body, answer.text)
        assert PASSWORD not in answer.text
    assert admin_client.get(f"{V1}/connections/nope", headers=admin).status_code == 404
    assert admin_client.delete(f"{V1}/connections/sales", headers=admin).status_code == 204
    assert admin_client.delete(f"{V1}/connections/sales", headers=admin).status_code == 404
    left = admin_client.get(f"{V1}/connections", headers=AUTH).json()["connections"]
    assert [c["name"] for c in left] == ["http1"]
    said = [r.getMessage() for r in caplog.records]
    assert "connection 'sales' added by 'ada'" in said
    assert "connection 'sales' deleted by 'ada'" in said
    assert "connection 'http1' added by 'api (bearer token)'" in said


def test_variables_mask_a_secret_value(
    admin_client: TestClient, keyed: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="sluice.scheduler.api.audit")
    admin = _bearer(add_user(keyed.database_url, "ada", Role.ADMIN))
    put = admin_client.put(f"{V1}/variables/region", json={"value": "eu-west"}, headers=admin)
    assert put.json() == {"key": "region", "value": "eu-west", "secret": False}
    secret = admin_client.put(
        f"{V1}/variables/api_key", json={"value": "very-secret-1", "secret": True}, headers=admin
    )
    assert secret.json() == {"key": "api_key", "value": "***", "secret": True}
    listed = admin_client.get(f"{V1}/variables", headers=admin)
    assert listed.json() == {
        "variables": [
            {"key": "api_key", "value": "***", "secret": True},
            {"key": "region", "value": "eu-west", "secret": False},
        ]
    }
    got = admin_client.get(f"{V1}/variables/api_key", headers=admin)
    assert got.json() == {"key": "api_key", "value": "***", "secret": True}
    assert admin_client.get(f"{V1}/variables/region", headers=admin).json()["value"] == "eu-west"
    for answer in (secret, listed, got):
        assert "very-secret-1" not in answer.text
    assert "very-secret-1" not in str(rows(keyed.database_url, "SELECT * FROM variable"))
    # replaced, then refused: a control character, an overlong value, an unknown field
    again = admin_client.put(f"{V1}/variables/region", json={"value": "us-east"}, headers=admin)
    assert again.json()["value"] == "us-east"
    for body in ({"value": 3}, {"value": "x" * 70_000}, {"value": "x", "hidden": True}, {}):
        answer = admin_client.put(f"{V1}/variables/region", json=body, headers=admin)
        assert answer.status_code == 422, body
    control = admin_client.put(f"{V1}/variables/a%07b", json={"value": "x"}, headers=admin)
    assert control.status_code == 422
    assert admin_client.get(f"{V1}/variables/nope", headers=admin).status_code == 404
    assert admin_client.delete(f"{V1}/variables/api_key", headers=admin).status_code == 204
    assert admin_client.delete(f"{V1}/variables/api_key", headers=admin).status_code == 404
    said = [r.getMessage() for r in caplog.records]
    assert "variable 'api_key' set by 'ada' (secret)" in said
    assert "variable 'api_key' deleted by 'ada'" in said
    assert all("very-secret-1" not in line for line in said)


def test_without_a_fernet_key_nothing_is_stored(client: TestClient, settings: Settings) -> None:
    assert not settings.fernet_key
    for method, path, body in (
        ("POST", "/connections", {"name": "c", "uri": URI}),
        ("PUT", "/variables/v", {"value": "x"}),
    ):
        answer = client.request(method, V1 + path, json=body, headers=AUTH)
        assert answer.status_code == 409, answer.text
        assert "SLUICE_FERNET_KEY is not set" in answer.json()["detail"]
        assert PASSWORD not in answer.text
    assert rows(settings.database_url, "SELECT * FROM connection") == []
    assert rows(settings.database_url, "SELECT * FROM variable") == []
    # with nothing stored, lists need no key
    assert client.get(f"{V1}/variables", headers=AUTH).json() == {"variables": []}


def test_an_admin_logged_in_manages_them_with_the_csrf_token(
    admin_client: TestClient, keyed: Settings
) -> None:
    token = add_user(keyed.database_url, "ada", Role.ADMIN)
    login = admin_client.post(f"{V1}/session", json={"user": "ada", "token": token})
    csrf = login.json()["csrf_token"]
    body = {"value": "x"}
    assert admin_client.put(f"{V1}/variables/k", json=body).status_code == 403
    made = admin_client.put(f"{V1}/variables/k", json=body, headers={"X-CSRF-Token": csrf})
    assert made.status_code == 200
    assert admin_client.get(f"{V1}/variables/k").json()["value"] == "x"
