"""The web UI: four HTML pages and their static assets, served by the API app: the DAGs,
one DAG (its runs), one version of a git bundle's DAG (its file's code), and the login.

Plain HTML, CSS and JavaScript from `static/` (no build step, nothing from a
CDN). The pages hold no data: their scripts read everything from `/api/v1`, as the
user logged in (`/login`: a session cookie, and its CSRF token on writes) or with the
API token the user typed, if any (kept in the browser's localStorage).
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

STATIC_DIR = Path(__file__).parent / "static"

PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    ),
    "Cache-Control": "no-cache",
}
"""The pages' own headers; those every response carries (nosniff, no referrer) are set by
`headers.SecurityHeaders`."""


def _page(name: str) -> FileResponse:
    return FileResponse(STATIC_DIR / name, media_type="text/html", headers=PAGE_HEADERS)


def install_ui(app: FastAPI) -> None:
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")

    @app.get("/", include_in_schema=False)
    def index() -> FileResponse:
        return _page("index.html")

    @app.get("/login", include_in_schema=False)
    def login_page() -> FileResponse:
        return _page("login.html")

    @app.get("/dags/{dag_id}", include_in_schema=False)
    def dag_page(dag_id: str) -> FileResponse:
        return _page("dag.html")

    @app.get("/dags/{dag_id}/versions/{sha}", include_in_schema=False)
    def version_page(dag_id: str, sha: str) -> FileResponse:
        return _page("version.html")
