"""The web UI's login (`/api/v1/session`), in process: a user's token or password makes a
session cookie (HttpOnly, SameSite=Strict, Secure over HTTPS); a write made with the
cookie needs its CSRF token (else 403, nothing written); logout, expiry and deleting the
user end it (401); bearer tokens work as before, without a CSRF token."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, update

from sluice.scheduler.api import create_app
from sluice.scheduler.api.auth import SESSION_COOKIE
from sluice.scheduler.api.config import ApiConfig
from sluice.scheduler.core.db import make_engine, make_session_factory, transaction
from sluice.scheduler.core.models import DagRun, UiSession
from sluice.scheduler.core.queries import users
from sluice.scheduler.core.roles import Role
from sluice.scheduler.core.settings import Settings
from tests.api.conftest import AUTH, TOKEN, client_for
from tests.api.people import PASSWORD, add_user

V1 = "/api/v1"
TRIGGER = f"{V1}/dags/manual_only/runs"
CSRF_REFUSED = "CSRF token missing or wrong"


@pytest.fixture
def tokens(settings: Settings) -> dict[str, str]:
    """otto (operator, with a password), vera (viewer), ada (admin): their tokens."""
    return {
        "otto": add_user(settings.database_url, "otto", Role.OPERATOR, password=PASSWORD),
        "vera": add_user(settings.database_url, "vera", Role.VIEWER),
        "ada": add_user(settings.database_url, "ada", Role.ADMIN),
    }


@pytest.fixture
def read_auth_client(settings: Settings) -> Iterator[TestClient]:
    yield from client_for(settings, ApiConfig(token=TOKEN, read_auth=True))


def _runs(settings: Settings) -> list[str]:
    engine = make_engine(settings.database_url)
    try:
        with transaction(make_session_factory(engine)) as session:
            found = session.scalars(select(DagRun.run_id).where(DagRun.dag_id == "manual_only"))
            return list(found)
    finally:
        engine.dispose()


def _sessions(settings: Settings, when: dt.datetime | None = None) -> int:
    """How many sessions are stored; with `when`, every one now ends at `when`."""
    engine = make_engine(settings.database_url)
    try:
        with transaction(make_session_factory(engine)) as session:
            if when is not None:
                session.execute(update(UiSession).values(expires_at=when))
            return len(session.scalars(select(UiSession.id_hash)).all())
    finally:
        engine.dispose()


def _login(client: TestClient, user: str, **secret: str) -> dict[str, str]:
    answer = client.post(f"{V1}/session", json={"user": user, **secret})
    assert answer.status_code == 200, answer.text
    body: dict[str, str] = answer.json()
    return body


def test_a_token_login_sets_a_strict_httponly_cookie(
    client: TestClient, tokens: dict[str, str], settings: Settings
) -> None:
    answer = client.post(f"{V1}/session", json={"user": "otto", "token": tokens["otto"]})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["user"] == "otto" and body["role"] == "operator" and len(body["csrf_token"]) >= 40
    cookie = answer.headers["set-cookie"]
    flags = {part.strip().lower() for part in cookie.split(";")}
    assert cookie.startswith(f"{SESSION_COOKIE}=")
    assert {"httponly", "samesite=strict", "path=/", "max-age=43200"} <= flags
    assert "secure" not in flags  # plain HTTP: a Secure cookie would never come back
    assert answer.headers["cache-control"] == "no-store"
    # the database keeps the id's hash, never the id
    session_id = client.cookies[SESSION_COOKIE]
    engine = make_engine(settings.database_url)
    with transaction(make_session_factory(engine)) as session:
        stored = session.scalars(select(UiSession)).one()
        assert stored.id_hash != session_id and session_id not in stored.id_hash
        assert stored.user_name == "otto"
    engine.dispose()
    # who is logged in, for the UI
    me = client.get(f"{V1}/session")
    assert me.status_code == 200
    assert me.json() | {"expires_at": None} == body | {"expires_at": None}


def test_the_cookie_is_secure_over_https(settings: Settings, tokens: dict[str, str]) -> None:
    app = create_app(settings, config=ApiConfig(token=TOKEN))
    with TestClient(app, base_url="https://testserver") as client:
        answer = client.post(f"{V1}/session", json={"user": "vera", "token": tokens["vera"]})
        assert answer.status_code == 200
        assert "secure" in {p.strip().lower() for p in answer.headers["set-cookie"].split(";")}
        assert client.get(f"{V1}/session").json()["user"] == "vera"


def test_a_password_login_and_wrong_logins(client: TestClient, tokens: dict[str, str]) -> None:
    assert _login(client, "otto", password=PASSWORD)["role"] == "operator"
    refused = [
        {"user": "otto", "password": "not the password"},
        {"user": "vera", "password": PASSWORD},  # no password set
        {"user": "nobody", "password": PASSWORD},  # no such user
        {"user": "vera", "token": tokens["otto"]},  # someone else's token
        {"user": "otto", "token": "slu_" + "x" * 43},
        {"user": "otto", "token": TOKEN},  # the shared token is no one's login
    ]
    details = set()
    fresh = TestClient(client.app)
    for body in refused:
        answer = fresh.post(f"{V1}/session", json=body)
        assert answer.status_code == 401, body
        assert SESSION_COOKIE not in answer.headers.get("set-cookie", "")
        details.add(answer.json()["detail"])
    assert details == {"the user name, token or password is wrong"}  # no hint of who exists
    for body in (
        {"user": "otto"},
        {"user": "otto", "token": tokens["otto"], "password": PASSWORD},
        {"user": "x" * 251, "password": PASSWORD},
        {"user": "otto", "password": "p" * 1025},
        {"user": "otto", "token": "slu_" + "x" * 300},
        {"user": "otto", "password": PASSWORD, "role": "admin"},
    ):
        assert fresh.post(f"{V1}/session", json=body).status_code == 422, body


def test_a_write_with_the_cookie_needs_the_csrf_token(
    client: TestClient, tokens: dict[str, str], settings: Settings
) -> None:
    csrf = _login(client, "otto", token=tokens["otto"])["csrf_token"]
    # the cookie alone (what a cross-site form sends): refused before the body is read
    for headers in ({}, {"X-CSRF-Token": "wrong"}, {"X-CSRF-Token": ""}):
        answer = client.post(TRIGGER, json={"run_id": "forged"}, headers=headers)
        assert answer.status_code == 403, answer.text
        assert CSRF_REFUSED in answer.json()["detail"]
    form = client.post(TRIGGER, data={"run_id": "forged"})  # a form post, no header
    assert form.status_code == 403 and CSRF_REFUSED in form.json()["detail"]
    assert _runs(settings) == []
    # with it: the operator triggers, and the note names them
    made = client.post(TRIGGER, json={"run_id": "by-otto"}, headers={"X-CSRF-Token": csrf})
    assert made.status_code == 201, made.text
    note = client.put(
        f"{TRIGGER}/by-otto/note", json={"note": "looked"}, headers={"X-CSRF-Token": csrf}
    )
    assert note.status_code == 200 and note.json()["who"] == "otto", note.text
    assert _runs(settings) == ["by-otto"]
    # an admin's write is refused to an operator's cookie, CSRF token or not
    pool = client.put(f"{V1}/pools/p1", json={"slots": 2}, headers={"X-CSRF-Token": csrf})
    assert pool.status_code == 403 and "operator" in pool.json()["detail"]


def test_a_viewer_reads_and_writes_nothing(
    client: TestClient, tokens: dict[str, str], settings: Settings
) -> None:
    csrf = _login(client, "vera", token=tokens["vera"])["csrf_token"]
    assert client.get(f"{V1}/dags").status_code == 200
    answer = client.post(TRIGGER, json={"run_id": "v"}, headers={"X-CSRF-Token": csrf})
    assert answer.status_code == 403 and "viewer" in answer.json()["detail"]
    assert _runs(settings) == []


def test_bearer_tokens_need_no_csrf_token_and_win_over_the_cookie(
    client: TestClient, tokens: dict[str, str], settings: Settings
) -> None:
    _login(client, "vera", token=tokens["vera"])
    # the cookie is a viewer's; the bearer token decides, and needs no CSRF token
    by_shared = client.post(TRIGGER, json={"run_id": "shared"}, headers=AUTH)
    assert by_shared.status_code == 201, by_shared.text
    by_otto = client.post(
        TRIGGER, json={"run_id": "otto"}, headers={"Authorization": f"Bearer {tokens['otto']}"}
    )
    assert by_otto.status_code == 201
    bad = client.post(TRIGGER, json={"run_id": "bad"}, headers={"Authorization": "Bearer nope"})
    assert bad.status_code == 401
    assert sorted(_runs(settings)) == ["otto", "shared"]


def test_logout_ends_the_session(
    client: TestClient, tokens: dict[str, str], settings: Settings
) -> None:
    csrf = _login(client, "otto", password=PASSWORD)["csrf_token"]
    old_cookie = client.cookies[SESSION_COOKIE]
    assert client.delete(f"{V1}/session").status_code == 403  # a write: its CSRF token too
    out = client.delete(f"{V1}/session", headers={"X-CSRF-Token": csrf})
    assert out.status_code == 204
    cleared = out.headers["set-cookie"].lower()
    assert cleared.startswith(f"{SESSION_COOKIE}=") and "max-age=0" in cleared
    assert _sessions(settings) == 0
    assert client.get(f"{V1}/session").status_code == 401
    # the old cookie, sent again with its CSRF token, is nobody now
    client.cookies.set(SESSION_COOKIE, old_cookie)
    again = client.post(TRIGGER, json={"run_id": "late"}, headers={"X-CSRF-Token": csrf})
    assert again.status_code == 401 and "log in again" in again.json()["detail"]
    assert _runs(settings) == []


def test_a_viewer_may_log_out(client: TestClient, tokens: dict[str, str]) -> None:
    csrf = _login(client, "vera", token=tokens["vera"])["csrf_token"]
    assert client.delete(f"{V1}/session", headers={"X-CSRF-Token": csrf}).status_code == 204


def test_reads_with_read_auth_take_the_cookie_until_it_ends(
    read_auth_client: TestClient, tokens: dict[str, str], settings: Settings
) -> None:
    client = read_auth_client
    assert client.get(f"{V1}/dags").status_code == 401
    _login(client, "vera", token=tokens["vera"])
    assert client.get(f"{V1}/dags").status_code == 200
    # an admin's read is still an admin's
    assert client.get(f"{V1}/users").status_code == 403
    # expired: 401, and nothing else changed
    _sessions(settings, when=dt.datetime(2020, 1, 1, tzinfo=dt.UTC))
    answer = client.get(f"{V1}/dags")
    assert answer.status_code == 401 and "log in again" in answer.json()["detail"]
    assert client.get(f"{V1}/session").status_code == 401


def test_deleting_the_user_ends_their_sessions(
    client: TestClient, tokens: dict[str, str], settings: Settings
) -> None:
    csrf = _login(client, "otto", token=tokens["otto"])["csrf_token"]
    engine = make_engine(settings.database_url)
    with transaction(make_session_factory(engine)) as session:
        users.delete_user(session, "otto")
    engine.dispose()
    assert _sessions(settings) == 0
    answer = client.post(TRIGGER, json={"run_id": "ghost"}, headers={"X-CSRF-Token": csrf})
    assert answer.status_code == 401


def test_a_new_login_ends_the_previous_session_of_the_browser(
    client: TestClient, tokens: dict[str, str], settings: Settings
) -> None:
    _login(client, "vera", token=tokens["vera"])
    _login(client, "otto", token=tokens["otto"])
    assert _sessions(settings) == 1
    assert client.get(f"{V1}/session").json()["user"] == "otto"


def test_a_forged_or_overlong_cookie_is_nobody(
    read_auth_client: TestClient, tokens: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    client = read_auth_client
    caplog.set_level(logging.WARNING)
    for value in ("forged", "x" * 5000):
        client.cookies.set(SESSION_COOKIE, value)
        assert client.get(f"{V1}/dags").status_code == 401
        assert client.post(TRIGGER, json={}, headers={"X-CSRF-Token": "x"}).status_code == 401
