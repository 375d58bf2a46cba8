"""The UI's login in headless Chromium (issue 45): with reads needing a login, a page
sends the user to the login page and back; an operator logged in triggers a run with the
UI's button; a viewer sees no trigger button (nor the task and run buttons); and a form
on another origin that posts to the trigger route, which the browser sends with the
session cookie (the same site: 127.0.0.1 on another port), is refused for want of the
CSRF token, and no run is made.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sluice.scheduler.api.config import ApiConfig
from sluice.scheduler.core.roles import Role
from sluice.scheduler.core.settings import Settings
from tests.api.conftest import TOKEN
from tests.api.people import PASSWORD, add_user
from tests.api.test_browser import ServedApi, browser, new_page
from tests.integration.test_cancel_run import rows

__all__ = ["browser"]  # the fixture, used by name

FORGED_PAGE = """<!doctype html>
<html><body onload="document.forms[0].submit()">
<form method="post" action="{action}">
  <input name="run_id" value="forged-run">
</form>
</body></html>
"""


class OtherOrigin:
    """A tiny page server on another port of 127.0.0.1 (another origin, the same site)
    whose one page posts a form to `action` as soon as it loads."""

    def __init__(self, action: str) -> None:
        page = FORGED_PAGE.format(action=action).encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> OtherOrigin:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


@pytest.fixture
def served(settings: Settings) -> Iterator[ServedApi]:
    with ServedApi(settings, ApiConfig(token=TOKEN, read_auth=True)) as api:
        yield api


def _runs(settings: Settings) -> list[str]:
    found = rows(settings.database_url, "SELECT run_id FROM dag_run WHERE dag_id = 'manual_only'")
    return sorted(str(r[0]) for r in found)


def _log_in(page: Any, expect: Any, user: str, *, token: str | None = None) -> None:
    page.fill("#login-user", user)
    if token is not None:
        page.check("#kind-token")
        expect(page.locator("#login-secret-label")).to_have_text("API token")
        page.fill("#login-secret", token)
    else:
        page.fill("#login-secret", PASSWORD)
    page.get_by_role("button", name="Log in").click()


def test_login_trigger_viewer_and_a_forged_form(
    browser: Any, served: ServedApi, settings: Settings, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    otto = add_user(settings.database_url, "otto", Role.OPERATOR, password=PASSWORD)
    vera = add_user(settings.database_url, "vera", Role.VIEWER)
    base = served.url
    page, errors = new_page(browser)
    try:
        # Reads need a login: the DAG's page sends the user to the login page.
        page.goto(base + "/dags/manual_only")
        expect(page).to_have_url(base + "/login?next=%2Fdags%2Fmanual_only")
        # A wrong password is said in one line; the right one logs in, and back.
        page.fill("#login-user", "otto")
        page.fill("#login-secret", "not the password")
        page.get_by_role("button", name="Log in").click()
        expect(page.locator("#login-result")).to_have_text(
            "the user name, token or password is wrong"
        )
        _log_in(page, expect, "otto")
        expect(page).to_have_url(base + "/dags/manual_only")
        expect(page.locator("h1")).to_have_text("manual_only")
        expect(page.locator("#who")).to_have_text("otto (operator)")
        expect(page.locator("#token-form")).to_be_hidden()
        cookie = next(c for c in page.context.cookies() if c["name"] == "sluice_session")
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        assert page.evaluate("document.cookie") == ""  # the page's script never sees it

        # The operator triggers a run with the UI's button.
        page.fill("#run-id", "ui-login-1")
        page.get_by_role("button", name="Trigger").click()
        expect(page.locator("#trigger-result")).to_contain_text("Triggered run ui-login-1")
        assert _runs(settings) == ["ui-login-1"]

        # Log out: back to the login page; the session is gone.
        page.get_by_role("button", name="Log out").click()
        expect(page).to_have_url(base + "/login")
        assert rows(settings.database_url, "SELECT * FROM ui_session") == []

        # A viewer (with a token) sees the DAG and its run, and no button that writes.
        _log_in(page, expect, "vera", token=vera)
        expect(page).to_have_url(base + "/")
        expect(page.locator("#who")).to_have_text("vera (viewer)")
        page.goto(base + "/dags/manual_only")
        expect(page.locator('th[data-run="ui-login-1"]')).to_be_visible()
        expect(page.get_by_role("button", name="Trigger")).to_have_count(0)
        expect(page.locator("#trigger-form")).to_be_hidden()
        expect(page.locator("#pause-slot").get_by_role("switch")).to_be_disabled()
        page.locator('button.cell[data-run="ui-login-1"]').first.click()
        expect(page.locator("#panel")).to_be_visible()
        for name in ("Clear", "Mark success", "Cancel run", "Save note"):
            expect(page.get_by_role("button", name=name, exact=True)).to_have_count(0)
        page.get_by_role("button", name="Log out").click()
        expect(page).to_have_url(base + "/login")

        # The operator again; then a page of another origin posts a form to the trigger
        # route: the browser sends the session cookie with it (the same site), and
        # without the CSRF token the API refuses it.
        _log_in(page, expect, "otto", token=otto)
        expect(page.locator("#who")).to_have_text("otto (operator)")
        with OtherOrigin(base + "/api/v1/dags/manual_only/runs") as other:
            forged = browser_page_post(page, other.url)
        assert forged["status"] == 403, forged
        assert "CSRF token missing or wrong" in forged["body"], forged
        assert forged["cookie_sent"], forged
        assert _runs(settings) == ["ui-login-1"]
    except Exception as exc:
        page.screenshot(path=str(tmp_path / "failure.png"), full_page=True)
        raise AssertionError(f"UI login test failed ({exc}); see {tmp_path}/failure.png") from exc
    assert errors == []


def browser_page_post(page: Any, url: str) -> dict[str, Any]:
    """Open `url` (the other origin's page, which posts its form at once) in the same
    browser context: the form's request to the API as the browser sent it, and the
    answer."""
    with page.expect_response(
        lambda r: r.request.method == "POST" and "/api/v1/" in r.url
    ) as answered:
        page.goto(url)
    response = answered.value
    headers = response.request.all_headers()
    return {
        "status": response.status,
        "cookie_sent": "sluice_session=" in headers.get("cookie", ""),
        "csrf_sent": "x-csrf-token" in headers,
        "origin": headers.get("origin"),
        "body": response.text(),
    }
