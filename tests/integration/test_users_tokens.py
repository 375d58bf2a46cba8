"""People, roles and tokens (issue 45, item 3): `sluice users`, `sluice tokens`, and the
REST API's 401 and 403 by role, against real PostgreSQL.

A viewer reads and triggers nothing; an operator triggers and cancels but sets no pool;
an admin (and the shared SLUICE_API_TOKEN) sets pools. A revoked or expired token is
refused; the database holds no token in plain text; the audit log names the user.
"""

from __future__ import annotations

import json
import textwrap
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from sluice.scheduler.api.app import create_app
from sluice.scheduler.api.config import ApiConfig
from sluice.scheduler.core.settings import Settings
from tests.integration.test_cancel_run import rows
from tests.procs import Sluice

DAG = """
from sluice import DAG, task
with DAG("people", schedule=None):
    task(task_id="t")(lambda: None)
"""
SHARED = "shared-token-of-the-deployment"


def _token(sluice: Sluice, *args: str) -> str:
    out = sluice.ok("tokens", "create", *args)
    return out.strip().splitlines()[-1]  # as `$(sluice tokens create NAME | tail -1)`


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_roles_tokens_and_what_each_may_do(sluice: Sluice) -> None:
    (sluice.dags_folder / "people.py").write_text(textwrap.dedent(DAG))
    sluice.run("dags", "list")
    sluice.ok("users", "create", "vera", "--role", "viewer")
    sluice.ok("users", "create", "otto", "--role", "operator")
    sluice.ok("users", "create", "ada", "--role", "admin")
    viewer, operator, admin = _token(sluice, "vera"), _token(sluice, "otto"), _token(sluice, "ada")
    expiring = _token(sluice, "otto", "--expires", "1")
    revoked = _token(sluice, "otto")
    listed = json.loads(sluice.ok("tokens", "list", "--json"))
    assert [t["user"] for t in listed] == ["vera", "otto", "ada", "otto", "otto"]
    assert listed[3]["expires_at"] is not None and listed[0]["expires_at"] is None
    sluice.ok("tokens", "revoke", str(listed[4]["id"]))
    with_expiry = listed[3]["id"]
    engine = create_engine(sluice.database_url, poolclass=NullPool)
    with engine.begin() as conn:  # its day has passed
        conn.execute(
            text("UPDATE api_token SET expires_at = now() - interval '1 minute' WHERE id = :id"),
            {"id": with_expiry},
        )
    engine.dispose()
    # no token is stored, nor shown again, in plain text
    stored = json.dumps(
        [list(map(str, r)) for r in rows(sluice.database_url, "SELECT * FROM api_token")]
    )
    shown = sluice.ok("tokens", "list") + json.dumps(listed)
    for token in (viewer, operator, admin, expiring, revoked):
        assert token not in stored and token not in shown

    settings = Settings(
        database_url=sluice.database_url,
        broker_url=sluice.broker_url,
        namespace=sluice.namespace,
        dags_folder=sluice.dags_folder,
    )
    app = create_app(settings, config=ApiConfig(token=SHARED, read_auth=True))
    with TestClient(app, raise_server_exceptions=False) as client:

        def status(method: str, path: str, token: str | None, body: Any = None) -> int:
            headers = _auth(token) if token is not None else {}
            answer = client.request(method, path, headers=headers, json=body)
            if answer.status_code >= 400:
                detail = answer.json()["detail"]
                assert isinstance(detail, str) and "\n" not in detail, detail
            return answer.status_code

        runs, pool = "/api/v1/dags/people/runs", "/api/v1/pools/p1"
        # reads: any valid token (SLUICE_API_READ_AUTH=1), none without one
        assert status("GET", "/api/v1/dags", viewer) == 200
        assert status("GET", "/api/v1/dags", None) == 401
        assert status("GET", "/api/v1/dags", "slu_not-a-token") == 401
        # a viewer triggers nothing; an operator does; neither sets a pool
        assert status("POST", runs, viewer, {"conf": {}}) == 403
        assert status("POST", runs, operator, {"conf": {"by": "otto"}}) == 201
        assert status("PUT", pool, operator, {"slots": 3}) == 403
        assert status("PUT", pool, viewer, {"slots": 3}) == 403
        # an admin and the shared token do
        assert status("PUT", pool, admin, {"slots": 3}) == 200
        assert status("PUT", pool, SHARED, {"slots": 4}) == 200
        assert status("GET", "/api/v1/pools", viewer) == 200
        # revoked and expired tokens are refused
        assert status("POST", runs, revoked, {"conf": {}}) == 401
        assert status("POST", runs, expiring, {"conf": {}}) == 401
        assert status("GET", "/api/v1/dags", expiring) == 401
        # the audit log names who cancelled
        run_id = client.get(runs, headers=_auth(viewer)).json()["runs"][0]["run_id"]
        assert status("POST", f"{runs}/{run_id}/cancel", operator) == 200
    assert rows(sluice.database_url, "SELECT who, action FROM audit_log") == [("otto", "cancel")]
    assert rows(sluice.database_url, "SELECT slots FROM pool WHERE name = 'p1'") == [(4,)]
    used = rows(sluice.database_url, "SELECT last_used_at IS NOT NULL FROM api_token ORDER BY id")
    assert used[:3] == [(True,), (True,), (True,)]


def test_users_and_tokens_refuse_bad_input_with_one_line(sluice: Sluice) -> None:
    sluice.ok("users", "create", "ok", "--role", "viewer")
    refused = [
        ("users", "create", "ok", "--role", "viewer"),  # exists already
        ("users", "create", " padded", "--role", "viewer"),
        ("users", "create", "x" * 300, "--role", "admin"),
        ("users", "delete", "nobody"),
        ("tokens", "create", "nobody"),
        ("tokens", "create", "ok", "--expires", "0"),
        ("tokens", "revoke", "999"),
    ]
    for args in refused:
        done = sluice.cli(*args)
        assert done.returncode == 2, (args, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1, (args, done.stderr)
    bad_role = sluice.cli("users", "create", "z", "--role", "root")
    assert bad_role.returncode == 2
    assert rows(sluice.database_url, "SELECT name FROM sluice_user") == [("ok",)]
    assert rows(sluice.database_url, "SELECT count(*) FROM api_token") == [(0,)]
    # a password: hashed (scrypt), never stored as given
    done = sluice.cli("users", "set-password", "ok", input_text="short\n")
    assert done.returncode == 2 and "8 characters" in done.stderr
    assert (
        sluice.cli("users", "set-password", "ok", input_text="a long passphrase\n").returncode == 0
    )
    (stored,) = rows(sluice.database_url, "SELECT password_hash FROM sluice_user")[0]
    assert str(stored).startswith("scrypt$") and "a long passphrase" not in str(stored)
    users = json.loads(sluice.ok("users", "list", "--json"))
    assert [(u["name"], u["role"], u["has_password"]) for u in users] == [("ok", "viewer", True)]
    sluice.ok("users", "delete", "ok")
    assert rows(sluice.database_url, "SELECT count(*) FROM sluice_user") == [(0,)]


def test_an_admin_manages_users_and_tokens_through_the_api(sluice: Sluice) -> None:
    sluice.ok("db", "migrate")
    settings = Settings(
        database_url=sluice.database_url,
        broker_url=sluice.broker_url,
        namespace=sluice.namespace,
        dags_folder=sluice.dags_folder,
    )
    app = create_app(settings, config=ApiConfig(token=SHARED))
    admin = _auth(SHARED)
    with TestClient(app, raise_server_exceptions=False) as client:
        made = client.post(
            "/api/v1/users", json={"name": "otto", "role": "operator"}, headers=admin
        )
        assert made.status_code == 201 and made.json()["role"] == "operator"
        again = client.post("/api/v1/users", json={"name": "otto", "role": "viewer"}, headers=admin)
        assert again.status_code == 409
        bad = client.post("/api/v1/users", json={"name": " x", "role": "viewer"}, headers=admin)
        assert bad.status_code == 422
        assert client.post("/api/v1/users/nobody/tokens", json={}, headers=admin).status_code == 404
        new = client.post("/api/v1/users/otto/tokens", json={"expires_days": 7}, headers=admin)
        assert new.status_code == 201
        token, token_id = new.json()["token"], new.json()["id"]
        operator = _auth(token)
        # the operator's token works, but manages no one
        assert client.put("/api/v1/pools/p", json={"slots": 1}, headers=operator).status_code == 403
        assert client.get("/api/v1/users", headers=operator).status_code == 403
        listed = client.get("/api/v1/tokens", headers=admin)
        assert listed.status_code == 200 and token not in listed.text
        assert [t["user"] for t in listed.json()["tokens"]] == ["otto"]
        revoked = client.post(f"/api/v1/tokens/{token_id}/revoke", headers=admin)
        assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
        assert client.get("/api/v1/users", headers=operator).status_code == 401
        assert client.post("/api/v1/tokens/999/revoke", headers=admin).status_code == 404
        assert client.delete("/api/v1/users/otto", headers=admin).status_code == 204
        assert client.delete("/api/v1/users/otto", headers=admin).status_code == 404
        assert client.get("/api/v1/users", headers=admin).json()["users"] == []
    assert rows(sluice.database_url, "SELECT count(*) FROM api_token") == [(0,)]
