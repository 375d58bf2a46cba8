"""Syncing DAG bundles into the database, in-process on the embedded SQLite database: the
versions each commit stores, ids unique across bundles, and the checkout cache.

The git remote is a bare repository made by the test (`test_dag_bundles.Repo`); the DAG
files are parsed in the parser subprocess, as a scheduler parses them.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from sluice.scheduler.core.bundle_specs import BundleSpec
from sluice.scheduler.core.bundles import BundleError, GitBundle, bundles_of
from sluice.scheduler.core.db import make_engine, make_session_factory
from sluice.scheduler.core.models import BundleState, Dag, DagFile, DagVersion
from sluice.scheduler.core.settings import ConfigError, Settings
from sluice.scheduler.scheduling.bundle_sync import sync_bundles
from tests.integration.test_dag_bundles import Repo

NOW = dt.datetime(2026, 12, 6, tzinfo=dt.UTC)
World = tuple[Repo, Settings, sessionmaker[Session], Path]
"""The bundle's remote, settings naming it and a folder bundle, the database, the folder."""


def dag_text(dag_id: str, tasks: list[str], note: str = "") -> str:
    body = "\n".join(f"    @task\n    def {t}():\n        return {note!r}\n" for t in tasks)
    return f"from sluice import DAG, task\n\nwith DAG({dag_id!r}, schedule=None) as dag:\n{body}"


@pytest.fixture
def world(tmp_path: Path, sqlite_url: str) -> Iterator[World]:
    repo = Repo(tmp_path / "repo")
    folder = tmp_path / "local"
    folder.mkdir()
    bundles = [
        {"name": "main", "kind": "git", "url": str(repo.remote), "subdir": "dags"},
        {"name": "local", "kind": "folder", "path": str(folder)},
    ]
    settings = Settings.from_env(
        {
            "SLUICE_DATABASE_URL": sqlite_url,
            "SLUICE_DAG_BUNDLES": json.dumps(bundles),
            "SLUICE_BUNDLE_CACHE": str(tmp_path / "cache"),
            "SLUICE_PARSE_TIMEOUT": "10",
        }
    )
    engine = make_engine(sqlite_url)
    yield repo, settings, make_session_factory(engine), folder
    engine.dispose()


def test_each_commit_that_changes_a_dag_is_a_version(
    world: World,
) -> None:
    repo, settings, factory, _ = world
    gits = bundles_of(settings)
    v1 = repo.commit({"dags/etl.py": dag_text("etl", ["a"])}, "one task")
    sync_bundles(factory, settings, gits, now=NOW)
    # three commits between two fetches: each that changes the DAG is a version
    v2 = repo.commit({"dags/etl.py": dag_text("etl", ["a", "b"])}, "two tasks")
    repo.commit({"README.md": "docs only\n"}, "outside the DAGs' folder")
    v4 = repo.commit({"dags/etl.py": dag_text("etl", ["a", "b"], note="new body")}, "a body")
    v5 = repo.commit({"README.md": "more docs\n"}, "docs again")
    synced = sync_bundles(factory, settings, gits, now=NOW)
    assert synced.changed and not synced.fetch_errors
    with factory() as session:
        versions = session.execute(
            select(DagVersion.commit_sha, DagVersion.subject).order_by(DagVersion.id)
        ).all()
        assert [tuple(v) for v in versions] == [
            (v1, "one task"),
            (v2, "two tasks"),
            (v4, "a body"),  # same definition, new code: a version
        ]
        dag = session.get(Dag, "etl")
        assert dag is not None
        assert dag.bundle_version == v5  # new runs take the newest commit
        assert dag.fileloc == "bundle://main/dags/etl.py"
        latest = session.get(DagVersion, dag.version_id)
        assert latest is not None and latest.commit_sha == v4
        state = session.get(BundleState, "main")
        assert state is not None and state.head_commit == v5 and state.failing_since is None


def test_a_dag_id_is_unique_across_bundles(
    world: World,
) -> None:
    repo, settings, factory, folder = world
    repo.commit({"dags/etl.py": dag_text("etl", ["a"])}, "etl")
    sync_bundles(factory, settings, bundles_of(settings), now=NOW)
    (folder / "also_dag.py").write_text(dag_text("etl", ["z"]))
    sync_bundles(factory, settings, bundles_of(settings), now=NOW)
    with factory() as session:
        error = session.scalar(
            select(DagFile.import_error).where(DagFile.fileloc.like("%also_dag.py"))
        )
        dag = session.get(Dag, "etl")
    assert error == (
        "DagDefinitionError: dag_id 'etl' is already defined in bundle://main/dags/etl.py"
    )
    assert dag is not None and list(dag.serialized["tasks"]) == ["a"]


def test_the_checkout_cache_is_bounded_shared_and_refuses_options(
    world: World, tmp_path: Path
) -> None:
    repo, settings, _, _ = world
    shas = [
        repo.commit({"dags/etl.py": dag_text("etl", ["a"], note=str(n))}, f"c{n}") for n in range(4)
    ]
    spec = settings.bundles[0]
    bundle = GitBundle(spec, tmp_path / "shared", keep=2)
    bundle.fetch()
    for sha in shas:
        place = bundle.checkout(sha)
        assert (place / "dags" / "etl.py").is_file()
    kept = {p.name for p in (tmp_path / "shared" / "main").iterdir() if not p.name.startswith(".")}
    assert kept == {"mirror.git", shas[2], shas[3]}  # the two used last
    # another process of the host (another GitBundle) finds the checkout made
    again = GitBundle(spec, tmp_path / "shared", keep=2)
    assert again.checkout(shas[3]) == bundle.checkout(shas[3])
    assert again.resolve(shas[3][:7]) == shas[3]
    for hostile in ("--output=/tmp/x", "-c", "a..b", "x" * 300, "HEAD;rm"):
        with pytest.raises(BundleError, match="is not a commit, tag or branch name"):
            bundle.resolve(hostile)
    with pytest.raises(BundleError, match="has no commit, tag or branch"):
        bundle.resolve("0" * 40)
    # a file:// URL is fetched as a path is
    by_url = GitBundle(spec.model_copy(update={"url": repo.remote.as_uri()}), tmp_path / "url")
    assert by_url.fetch() == shas[-1]


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("[", "SLUICE_DAG_BUNDLES must be a JSON list of bundles"),
        ("[]", "SLUICE_DAG_BUNDLES must be a non-empty JSON list of bundles"),
        ('[{"name": "x", "kind": "git"}]', "git bundle 'x' needs a url"),
        ('[{"name": "x", "kind": "folder"}]', "folder bundle 'x' needs a path"),
        ('[{"name": "x", "kind": "svn"}]', "bundle 0.kind"),
        ('[{"name": "../x", "kind": "folder", "path": "d"}]', "bundle 0.name"),
        ('[{"name": "x", "kind": "git", "url": "-u", "ref": "main"}]', "cannot start with '-'"),
        ('[{"name": "x", "kind": "git", "url": "u", "ref": "--upload-pack=x"}]', "is not a ref"),
        ('[{"name": "x", "kind": "git", "url": "u", "subdir": "../up"}]', "inside the repository"),
        (
            json.dumps([{"name": "a", "kind": "folder", "path": p} for p in "xy"]),
            "names bundle 'a' twice",
        ),
    ],
)
def test_bad_bundles_are_one_line_naming_the_variable(value: str, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Settings.from_env({"SLUICE_DAG_BUNDLES": value})
    line = str(caught.value)
    assert line.startswith("SLUICE_DAG_BUNDLES") and says in line and "\n" not in line, line


def test_without_bundles_the_dags_folder_is_the_one_folder_bundle(tmp_path: Path) -> None:
    settings = Settings.from_env({"SLUICE_DAGS_FOLDER": str(tmp_path)})
    assert settings.bundles == (BundleSpec(name="dags", kind="folder", path=tmp_path),)
