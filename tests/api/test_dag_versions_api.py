"""The versions of a git bundle's DAG through the API and the web UI: a run triggered at a
version, the versions listed, a version's code, and the tasks two versions differ by.

A bare repository made by the test is the bundle; it is synced in this process
(`bundle_sync.sync_bundles`, as a scheduler syncs it), into a PostgreSQL database that
also holds the folder DAGs of `tests.api.conftest` (`demo`: a folder's DAG, unversioned).
No scheduler or worker runs: what is checked is what the API answers and the page shows.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from sluice.scheduler.api.config import ApiConfig
from sluice.scheduler.core.bundle_specs import parse_bundles
from sluice.scheduler.core.bundles import bundles_of
from sluice.scheduler.core.db import make_engine, make_session_factory, utcnow
from sluice.scheduler.core.settings import Settings
from sluice.scheduler.scheduling.bundle_sync import sync_bundles
from tests.api.conftest import AUTH, TOKEN, client_for
from tests.api.test_browser import ServedApi, launched_browser, new_page
from tests.integration.test_dag_bundles import Repo, bundle_env

DAG_V1 = """
from sluice import DAG, task

with DAG("versioned", schedule=None) as dag:
    @task
    def a():
        return "a-v1"

    @task
    def b():
        return "b-v1"

    a >> b
"""

DAG_V2 = """
from sluice import DAG, task

with DAG("versioned", schedule=None) as dag:
    @task
    def a():
        return "a-v2"

    @task
    def c():
        return "c-v2"

    a >> c
"""

RUNS = "/api/v1/dags/versioned/runs"
VERSIONS = "/api/v1/dags/versioned/versions"


@dataclass
class Bundled:
    settings: Settings
    v1: str
    v2: str


@pytest.fixture
def bundled(settings: Settings, tmp_path: Path) -> Bundled:
    """The DAG `versioned` of a git bundle at two commits, v1 (a >> b) then v2 (a >> c),
    each synced as a scheduler syncs it."""
    repo = Repo(tmp_path / "repo")
    bundled = settings.model_copy(
        update={
            "dag_bundles": parse_bundles(bundle_env(repo)),
            "bundle_cache": tmp_path / "cache",
        }
    )
    engine = make_engine(bundled.database_url)
    try:
        factory = make_session_factory(engine)
        v1 = repo.commit({"dags/versioned.py": DAG_V1}, "v1: a >> b")
        sync_bundles(factory, bundled, bundles_of(bundled), now=utcnow())
        v2 = repo.commit({"dags/versioned.py": DAG_V2}, "v2: a >> c")
        sync_bundles(factory, bundled, bundles_of(bundled), now=utcnow())
    finally:
        engine.dispose()
    return Bundled(bundled, v1, v2)


@pytest.fixture
def api(bundled: Bundled) -> Iterator[TestClient]:
    yield from client_for(bundled.settings, ApiConfig(token=TOKEN))


def task_ids(api: TestClient, run_id: str) -> set[str]:
    listed = api.get(f"{RUNS}/{run_id}/tasks")
    assert listed.status_code == 200, listed.text
    return {ti["task_id"] for ti in listed.json()["task_instances"]}


def version_of(sha: str, subject: str) -> dict[str, Any]:
    return {"sha": sha, "short": sha[:12], "subject": subject}


def test_a_run_triggered_at_a_version_takes_its_commit_and_tasks(
    api: TestClient, bundled: Bundled
) -> None:
    v1, v2 = bundled.v1, bundled.v2
    # When a run is triggered at v1 (by its short sha), and another at the latest version
    old = api.post(RUNS, json={"run_id": "old", "version": v1[:8]}, headers=AUTH)
    new = api.post(RUNS, json={"run_id": "new"}, headers=AUTH)

    # Then each keeps its full commit, shows its version, and has that version's tasks
    assert old.status_code == 201, old.text
    assert new.status_code == 201, new.text
    assert old.json()["bundle_version"] == v1
    assert old.json()["version"] == version_of(v1, "v1: a >> b")
    assert new.json()["bundle_version"] == v2
    assert new.json()["version"] == version_of(v2, "v2: a >> c")
    assert task_ids(api, "old") == {"a", "b"}
    assert task_ids(api, "new") == {"a", "c"}

    # and so do the run's page, the list of runs and the grid's columns
    assert api.get(f"{RUNS}/old").json()["version"] == version_of(v1, "v1: a >> b")
    listed = {r["run_id"]: r for r in api.get(RUNS).json()["runs"]}
    assert {k: (r["bundle_version"], r["version"]["sha"]) for k, r in listed.items()} == {
        "old": (v1, v1),
        "new": (v2, v2),
    }
    for grid_format in ("compact", "cells"):
        grid = api.get(f"/api/v1/dags/versioned/grid?format={grid_format}").json()
        assert {r["run_id"]: r["version"]["short"] for r in grid["runs"]} == {
            "old": v1[:12],
            "new": v2[:12],
        }

    # a folder's DAG has runs without a version
    demo = api.post("/api/v1/dags/demo/runs", json={"run_id": "plain"}, headers=AUTH).json()
    assert (demo["bundle_version"], demo["version"]) == (None, None)
    assert api.get("/api/v1/dags/demo/runs").json()["runs"][0]["version"] is None


def test_clearing_a_task_of_an_older_version_keeps_the_runs_version(
    api: TestClient, bundled: Bundled
) -> None:
    # b is in v1 only: the run at v1 still has it, and a clear keeps the run at v1
    assert api.post(RUNS, json={"run_id": "old", "version": bundled.v1}, headers=AUTH).is_success
    marked = api.post(f"{RUNS}/old/tasks/b/mark", json={"state": "failed"}, headers=AUTH)
    assert marked.status_code == 200, marked.text
    cleared = api.post(f"{RUNS}/old/tasks/b/clear", json={}, headers=AUTH)
    assert cleared.status_code == 200, cleared.text
    assert cleared.json()["cleared"] == 1
    assert api.get(f"{RUNS}/old").json()["bundle_version"] == bundled.v1
    assert task_ids(api, "old") == {"a", "b"}


@pytest.mark.parametrize(
    ("dag_id", "version", "said"),
    [
        ("versioned", "no-such-tag", "has no commit, tag or branch 'no-such-tag'"),
        ("versioned", "a..b", "is not a commit, tag or branch name"),
        ("versioned", "x" * 201, "version: String should have at most 200 characters"),
        ("versioned", "", "version: String should have at least 1 character"),
        ("demo", "main", "comes from a folder, which keeps no versions"),
    ],
)
def test_a_version_that_cannot_be_had_is_a_422_and_makes_no_run(
    api: TestClient, dag_id: str, version: str, said: str
) -> None:
    answer = api.post(
        f"/api/v1/dags/{dag_id}/runs", json={"run_id": "r", "version": version}, headers=AUTH
    )
    assert answer.status_code == 422, answer.text
    detail = answer.json()["detail"]
    assert said in detail and "\n" not in detail
    assert api.get(f"/api/v1/dags/{dag_id}/runs").json()["total"] == 0


def test_versions_are_listed_newest_first(api: TestClient, bundled: Bundled) -> None:
    v1, v2 = bundled.v1, bundled.v2
    assert api.post(RUNS, json={"version": v1}, headers=AUTH).status_code == 201

    listed = api.get(VERSIONS)

    assert listed.status_code == 200, listed.text
    body = listed.json()
    assert (body["dag_id"], body["versioned"]) == ("versioned", True)
    shown = [
        (v["sha"], v["short"], v["subject"], v["author"], v["runs"], sorted(v["tasks"]))
        for v in body["versions"]
    ]
    assert shown == [
        (v2, v2[:12], "v2: a >> c", "Ada Lovelace", 0, ["a", "c"]),
        (v1, v1[:12], "v1: a >> b", "Ada Lovelace", 1, ["a", "b"]),
    ]
    assert body["versions"][0]["fileloc"] == "bundle://main/dags/versioned.py"
    assert api.get(f"{VERSIONS}?limit=1").json()["versions"][0]["sha"] == v2
    # a folder's DAG keeps none; an unknown DAG is a 404
    assert api.get("/api/v1/dags/demo/versions").json() == {
        "dag_id": "demo",
        "versioned": False,
        "versions": [],
    }
    assert api.get("/api/v1/dags/nope/versions").status_code == 404


def test_a_versions_code_is_its_dag_file_at_that_commit(api: TestClient, bundled: Bundled) -> None:
    v1 = bundled.v1
    for named in (v1, v1[:7]):
        code = api.get(f"{VERSIONS}/{named}/code")
        assert code.status_code == 200, code.text
        body = code.json()
        assert body["content"] == textwrap.dedent(DAG_V1)
        assert (body["sha"], body["path"], body["truncated"]) == (v1, "dags/versioned.py", False)
        assert body["subject"] == "v1: a >> b"

    assert api.get(f"{VERSIONS}/{'0' * 40}/code").status_code == 404
    assert api.get("/api/v1/dags/demo/versions/abcdef12/code").status_code == 404
    assert api.get("/api/v1/dags/nope/versions/abcdef12/code").status_code == 404
    assert api.get(f"{VERSIONS}/NOT-A-SHA/code").status_code == 422


def test_the_tasks_a_version_adds_and_removes(api: TestClient, bundled: Bundled) -> None:
    v1, v2 = bundled.v1, bundled.v2

    def changes(sha: str, since: str | None = None) -> dict[str, Any]:
        query = f"?since={since}" if since else ""
        answer = api.get(f"{VERSIONS}/{sha}/changes{query}")
        assert answer.status_code == 200, answer.text
        body: dict[str, Any] = answer.json()
        return body

    assert changes(v2) == {
        "dag_id": "versioned",
        "sha": v2,
        "since": v1,
        "added": ["c"],
        "removed": ["b"],
    }
    assert changes(v1) == {
        "dag_id": "versioned",
        "sha": v1,
        "since": None,
        "added": ["a", "b"],
        "removed": [],
    }
    backwards = changes(v1, since=v2[:10])
    assert (backwards["since"], backwards["added"], backwards["removed"]) == (v2, ["b"], ["c"])
    assert api.get(f"{VERSIONS}/{v2}/changes?since={'0' * 12}").status_code == 404
    assert api.get(f"{VERSIONS}/{'0' * 12}/changes").status_code == 404
    assert api.get(f"{VERSIONS}/{v2}/changes?since=zz").status_code == 422


@pytest.fixture
def browser() -> Iterator[Any]:
    yield from launched_browser()


def test_a_runs_short_sha_links_to_the_code_of_its_version(
    browser: Any, api: TestClient, bundled: Bundled
) -> None:
    from playwright.sync_api import expect

    # Given a run at v1, and the UI served
    v1 = bundled.v1
    created = api.post(RUNS, json={"run_id": "at_v1", "version": v1}, headers=AUTH)
    assert created.status_code == 201, created.text
    with ServedApi(bundled.settings, ApiConfig(token=TOKEN)) as served:
        page, errors = new_page(browser)
        page.goto(f"{served.url}/dags/versioned")

        # Then the run's column shows its short sha, linked to its version's page
        link = page.locator('#grid a.run-version[data-run="at_v1"]')
        expect(link).to_have_text(v1[:7])
        assert link.get_attribute("href") == f"/dags/versioned/versions/{v1}"
        expect(page.locator("#run-view-version")).to_have_text(f"Version {v1[:12]} v1: a >> b")

        # and that page shows the DAG file at v1 and the tasks it added
        link.click()
        page.wait_for_url(f"**/dags/versioned/versions/{v1}")
        expect(page.locator("#code")).to_contain_text('return "b-v1"')
        expect(page.locator("#added li")).to_have_text(["a", "b"])
        expect(page.locator("#versions tbody tr")).to_have_count(2)
        assert errors == []
