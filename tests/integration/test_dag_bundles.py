"""A run finishes on the code it started with: git DAG bundles and their versions.

A bare repository made by the test is the bundle (`SLUICE_DAG_BUNDLES`); real PostgreSQL,
Redis, `sluice scheduler` and `sluice worker` (each with a bundle cache of its own, as on
separate hosts). Each task appends `<run> <task>-<version>` to a file, so the code a try
ran is read from what it wrote.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
from pathlib import Path

import pytest

from tests.procs import Sluice, wait_until

DAG_V1 = """
import pathlib, time
from sluice import DAG, task

RECORD = pathlib.Path({record!r})
GATE = pathlib.Path({gate!r})

def record(context, what):
    with RECORD.open("a") as f:
        f.write(f"{{context['run_id']}} {{what}}\\n")

with DAG("versioned", schedule=None) as dag:
    @task
    def a(context):
        record(context, "a-v1")

    @task(retries=2, retry_delay=0.2)
    def b(context):
        deadline = time.monotonic() + 120
        while not GATE.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        record(context, "b-v1")

    a >> b
"""

DAG_V2 = """
import pathlib
from sluice import DAG, task

RECORD = pathlib.Path({record!r})

def record(context, what):
    with RECORD.open("a") as f:
        f.write(f"{{context['run_id']}} {{what}}\\n")

with DAG("versioned", schedule=None) as dag:
    @task
    def a(context):
        record(context, "a-v2")

    @task
    def c(context):
        record(context, "c-v2")

    a >> c
"""

DAILY = """
import pathlib
from datetime import datetime, timezone
from sluice import DAG, task

with DAG("daily", schedule="@daily", catchup=False,
         start_date=datetime(2026, 1, 1, tzinfo=timezone.utc)) as dag:
    @task
    def d(context):
        with pathlib.Path({record!r}).open("a") as f:
            f.write(f"{{context['run_id']}} d-{version}\\n")
"""

BROKEN = "from sluice import DAG\nraise RuntimeError('v3 does not import')\n"

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Ada Lovelace",
    "GIT_AUTHOR_EMAIL": "ada@example.org",
    "GIT_COMMITTER_NAME": "Ada Lovelace",
    "GIT_COMMITTER_EMAIL": "ada@example.org",
}


class Repo:
    """A bare repository (the bundle's remote) and a working copy that pushes to it."""

    def __init__(self, root: Path) -> None:
        self.remote = root / "dags.git"
        self.work = root / "work"
        root.mkdir()
        self._git(root, "init", "--quiet", "--bare", "--initial-branch=main", str(self.remote))
        self._git(root, "clone", "--quiet", str(self.remote), str(self.work))
        self._git(self.work, "checkout", "--quiet", "-B", "main")
        (self.work / "dags").mkdir()

    def commit(self, files: dict[str, str], subject: str) -> str:
        for name, content in files.items():
            (self.work / name).write_text(textwrap.dedent(content))
        self._git(self.work, "add", "--all")
        self._git(self.work, "commit", "--quiet", "-m", subject)
        self._git(self.work, "push", "--quiet", "origin", "main")
        return self._git(self.work, "rev-parse", "HEAD").strip()

    def tag(self, name: str, sha: str) -> None:
        self._git(self.work, "tag", name, sha)
        self._git(self.work, "push", "--quiet", "origin", name)

    @staticmethod
    def _git(cwd: Path, *args: str) -> str:
        env = {**os.environ, **GIT_ENV}
        return subprocess.run(
            ["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True
        ).stdout


def lines(record: Path) -> list[str]:
    return record.read_text().splitlines() if record.exists() else []


def bundle_env(repo: Repo) -> str:
    return json.dumps(
        [{"name": "main", "kind": "git", "url": str(repo.remote), "ref": "main", "subdir": "dags"}]
    )


def head_of(sluice: Sluice, dag_id: str) -> str | None:
    with sluice._connect() as conn:
        found = conn.exec_driver_sql(
            "SELECT bundle_version FROM dag WHERE dag_id = %(d)s", {"d": dag_id}
        ).scalar()
    return str(found) if found else None


def run_version(sluice: Sluice, dag_id: str, run_id: str) -> str:
    with sluice._connect() as conn:
        return str(
            conn.exec_driver_sql(
                "SELECT bundle_version FROM dag_run WHERE dag_id = %(d)s AND run_id = %(r)s",
                {"d": dag_id, "r": run_id},
            ).scalar()
        )


@pytest.mark.timeout(240)
def test_each_run_runs_the_code_of_its_commit(sluice: Sluice, tmp_path: Path) -> None:
    record, gate = tmp_path / "record.txt", tmp_path / "gate"
    repo = Repo(tmp_path / "repo")
    v1 = repo.commit(
        {
            "dags/versioned.py": DAG_V1.format(record=str(record), gate=str(gate)),
            "dags/daily.py": DAILY.format(record=str(record), version="v1"),
        },
        "v1: a >> b",
    )
    repo.tag("release-1", v1)
    sluice.extra_env["SLUICE_DAG_BUNDLES"] = bundle_env(repo)
    sluice.extra_env["SLUICE_BUNDLE_CACHE"] = str(tmp_path / "cache-scheduler")
    sluice.scheduler()
    sluice.extra_env["SLUICE_BUNDLE_CACHE"] = str(tmp_path / "cache-cli")
    wait_until(lambda: head_of(sluice, "versioned") == v1, timeout=60)
    r1 = sluice.trigger("versioned")  # no worker yet: r1's tries are all to come

    v2 = repo.commit(
        {
            "dags/versioned.py": DAG_V2.format(record=str(record)),
            "dags/daily.py": DAILY.format(record=str(record), version="v2"),
        },
        "v2: a >> c",
    )
    wait_until(lambda: head_of(sluice, "versioned") == v2, timeout=60)
    r2 = sluice.trigger("versioned")
    old = sluice.trigger("versioned", "--version", v1[:8], "--run-id", "by_sha")
    tagged = sluice.trigger("versioned", "--version", "release-1", "--run-id", "by_tag")
    assert run_version(sluice, "versioned", r1) == v1
    assert run_version(sluice, "versioned", r2) == v2
    assert run_version(sluice, "versioned", old) == v1  # the short sha, stored in full
    assert run_version(sluice, "versioned", tagged) == v1

    sluice.extra_env["SLUICE_BUNDLE_CACHE"] = str(tmp_path / "cache-worker")
    first = sluice.worker(concurrency=5)  # three b wait at the gate
    assert sluice.wait_run("versioned", r2, timeout=90) == "success", (
        sluice.db_task_states("versioned", r1),
        sluice.db_task_states("versioned", r2),
    )
    # r1's b (and the older runs') wait at the gate: the worker dies under them, once
    # every v1 run's a is recorded (a try of a killed with it would fail its run)
    v1_runs = (r1, old, tagged)
    try:
        wait_until(
            lambda: all(
                sluice.db_task_states("versioned", run_id).get("a", {}).get("state") == "success"
                for run_id in v1_runs
            ),
            timeout=60,
        )
    except AssertionError:
        states = {run_id: sluice.db_task_states("versioned", run_id) for run_id in v1_runs}
        raise AssertionError(f"a of a v1 run did not succeed: {states}\n{sluice.logs()}") from None
    wait_until(
        lambda: sluice.db_task_states("versioned", r1).get("b", {}).get("state") == "running",
        timeout=60,
    )
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    gate.touch()
    sluice.worker(concurrency=2)  # restarted, on the same cache

    for run_id in (r1, old, tagged):
        assert sluice.wait_run("versioned", run_id, timeout=90) == "success", sluice.logs()
    assert set(sluice.db_task_states("versioned", r1)) == {"a", "b"}
    assert set(sluice.db_task_states("versioned", r2)) == {"a", "c"}
    assert set(sluice.db_task_states("versioned", old)) == {"a", "b"}
    written = lines(record)
    for run_id in (r1, old, tagged):
        assert sorted(x.split()[1] for x in written if x.split()[0] == run_id) == [
            "a-v1",
            "b-v1",
        ], written
    assert sorted(x.split()[1] for x in written if x.split()[0] == r2) == ["a-v2", "c-v2"]
    checkouts = {p.name for p in (tmp_path / "cache-worker" / "main").iterdir()}
    assert {v1, v2} <= checkouts

    explained = json.loads(sluice.run("tasks", "explain", "versioned", r1, "b", "--json"))
    assert explained["state"] == "success", explained  # b of v1, which v2 lacks

    versions = json.loads(sluice.run("dags", "versions", "versioned", "--json"))
    assert [(v["commit_sha"], v["runs"], v["author"]) for v in versions] == [
        (v2, 1, "Ada Lovelace"),
        (v1, 3, "Ada Lovelace"),
    ]
    assert versions[0]["subject"] == "v2: a >> c"
    table = sluice.ok("dags", "versions", "versioned")
    assert v2[:12] in table and "v1: a >> b" in table

    # a commit that does not import: an import error of that commit; v2 stays
    v3 = repo.commit({"dags/versioned.py": BROKEN}, "v3: broken")
    listed = wait_until(
        lambda: [
            d
            for d in json.loads(sluice.run("dags", "list", "--json"))
            if d["import_error"] and v3[:12] in d["import_error"]
        ],
        timeout=60,
    )
    assert "v3 does not import" in listed[0]["import_error"]
    after = sluice.trigger("versioned")
    assert run_version(sluice, "versioned", after) == v2
    assert sluice.wait_run("versioned", after, timeout=90) == "success", sluice.logs()
    assert set(sluice.db_task_states("versioned", after)) == {"a", "c"}

    # a backfill of any commit
    done = sluice.cli(
        "backfill", "daily", "--start", "2026-02-01", "--end", "2026-02-02", "--version", v1[:10]
    )
    assert done.returncode == 0, done.stderr
    filled = sorted(x for x in lines(record) if x.startswith("backfill__"))
    assert [x.split()[1] for x in filled] == ["d-v1", "d-v1"], filled
    assert {run_version(sluice, "daily", x.split()[0]) for x in filled} == {v1}

    # a clear keeps the run's version; --latest-version moves it to v2's tasks
    sluice.ok("tasks", "clear", "versioned", old, "--task", "b")
    assert sluice.wait_run("versioned", old, timeout=90) == "success", sluice.logs()
    assert run_version(sluice, "versioned", old) == v1
    sluice.ok("tasks", "clear", "versioned", r1, "--latest-version")
    assert sluice.wait_run("versioned", r1, timeout=90) == "success", sluice.logs()
    assert run_version(sluice, "versioned", r1) == v2
    moved = sluice.db_task_states("versioned", r1)
    assert {t: row["state"] for t, row in moved.items()} == {
        "a": "success",
        "b": "removed",
        "c": "success",
    }
    written = lines(record)
    assert sorted(x.split()[1] for x in written if x.split()[0] == old) == [
        "a-v1",
        "b-v1",
        "b-v1",
    ]
    assert sorted(x.split()[1] for x in written if x.split()[0] == r1) == [
        "a-v1",
        "a-v2",
        "b-v1",
        "c-v2",
    ]


def test_a_folder_run_follows_its_dag_file_as_before(sluice: Sluice, tmp_path: Path) -> None:
    """No SLUICE_DAG_BUNDLES: the DAGs folder is one unversioned bundle, and a run whose
    DAG changed before its tasks ran ends in step with the current file."""
    record, gate = tmp_path / "record.txt", tmp_path / "gate"
    gate.touch()
    dag_file = sluice.dags_folder / "versioned.py"
    dag_file.write_text(textwrap.dedent(DAG_V1.format(record=str(record), gate=str(gate))))
    sluice.scheduler()
    r1 = sluice.trigger("versioned")
    with sluice._connect() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM dag_version").scalar() == 0
    dag_file.write_text(textwrap.dedent(DAG_V2.format(record=str(record))))
    sluice.run("dags", "list")  # the new file is parsed before any task runs
    sluice.worker()
    assert sluice.wait_run("versioned", r1, timeout=90) == "success", sluice.logs()
    states = {t: row["state"] for t, row in sluice.db_task_states("versioned", r1).items()}
    assert states == {"a": "success", "b": "removed", "c": "success"}
    assert sorted(x.split()[1] for x in lines(record)) == ["a-v2", "c-v2"]
    assert run_version(sluice, "versioned", r1) == "None"


def test_a_version_that_cannot_be_had_is_one_line_and_writes_nothing(
    sluice: Sluice, tmp_path: Path
) -> None:
    record, gate = tmp_path / "record.txt", tmp_path / "gate"
    repo = Repo(tmp_path / "repo")
    repo.commit({"dags/versioned.py": DAG_V1.format(record=str(record), gate=str(gate))}, "v1")
    sluice.extra_env["SLUICE_DAG_BUNDLES"] = bundle_env(repo)
    sluice.extra_env["SLUICE_BUNDLE_CACHE"] = str(tmp_path / "cache")
    for version, says in (
        ("0123456789abcdef", "has no commit, tag or branch '0123456789abcdef'"),
        ("--upload-pack=touch", "is not a commit, tag or branch name"),
        ("main..v2", "is not a commit, tag or branch name"),
    ):
        done = sluice.cli("dags", "trigger", "versioned", f"--version={version}")
        assert done.returncode == 2, done
        assert says in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    with sluice._connect() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM dag_run").scalar() == 0

    done = sluice.cli("dags", "versions", "versioned")
    assert done.returncode == 0, done.stderr


RETRIED = """
import pathlib
from sluice import DAG, task

with DAG("retried", schedule=None) as dag:
    @task(retries=5, retry_delay=0.5)
    def a(context):
        with pathlib.Path({record!r}).open("a") as f:
            f.write(f"{{context['run_id']}} a\\n")
"""


def test_an_unreachable_remote_keeps_the_last_commit_and_a_failed_checkout_is_retried(
    sluice: Sluice, tmp_path: Path
) -> None:
    record = tmp_path / "record.txt"
    repo = Repo(tmp_path / "repo")
    v1 = repo.commit({"dags/retried.py": RETRIED.format(record=str(record))}, "v1")
    sluice.extra_env["SLUICE_DAG_BUNDLES"] = bundle_env(repo)
    sluice.extra_env["SLUICE_DAGS_FOLDER"] = str(tmp_path / "unused")  # not needed: not there
    sluice.extra_env["SLUICE_BUNDLE_CACHE"] = str(tmp_path / "cache-scheduler")
    sluice.scheduler()
    sluice.extra_env["SLUICE_BUNDLE_CACHE"] = str(tmp_path / "cache-cli")
    wait_until(lambda: head_of(sluice, "retried") == v1, timeout=60)

    gone = repo.remote.with_name("moved.git")
    repo.remote.rename(gone)  # the remote cannot be reached
    report = wait_until(
        lambda: [
            b
            for b in json.loads(sluice.ok("status", "--json", "--workers-timeout", "0"))["bundles"]
            if b["failing_since"]
        ],
        timeout=60,
    )
    assert report[0]["name"] == "main" and report[0]["commit"] == v1, report
    assert "git fetch failed" in report[0]["error"], report
    shown = sluice.ok("status", "--workers-timeout", "0")
    assert "bundle main: fetching fails since" in " ".join(shown.split()), shown

    run_id = sluice.trigger("retried")  # the last commit fetched is still run
    assert run_version(sluice, "retried", run_id) == v1
    sluice.extra_env["SLUICE_BUNDLE_CACHE"] = str(tmp_path / "cache-worker")  # a new host
    sluice.worker()
    failed = wait_until(
        lambda: (row := sluice.db_task_states("retried", run_id)["a"])["error"] and row,
        timeout=60,
    )
    assert failed["error"].startswith("BundleError: bundle 'main': git fetch failed"), failed
    assert "\n" not in failed["error"]
    gone.rename(repo.remote)
    assert sluice.wait_run("retried", run_id, timeout=90) == "success", sluice.logs()
    assert sluice.db_task_states("retried", run_id)["a"]["try_number"] >= 2
    assert lines(record) == [f"{run_id} a"]
    wait_until(
        lambda: (
            not json.loads(sluice.ok("status", "--json", "--workers-timeout", "0"))["bundles"][0][
                "failing_since"
            ]
        ),
        timeout=60,
    )
