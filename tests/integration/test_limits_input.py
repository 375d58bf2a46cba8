"""Hostile input to `sluice.Concurrency` and `sluice.RateLimit`, as a user meets it with
`sluice standalone --trigger` on the embedded SQLite database: a key function that raises
or returns no valid key fails the try (the task's code never runs), the run fails, the
TI's error is one line naming the problem, and no key is left held; a limit defined
wrongly is an import error of its file, one line, shown by `sluice dags list` and by
standalone itself."""

from __future__ import annotations

import json
import os
import re
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_cancel_run import rows
from tests.procs import run_sluice, standalone

KEYS = """
from pathlib import Path
import sluice
from sluice import DAG, task

RAN = Path({ran!r})


def body(context):
    (RAN / f"{{context['dag_id']}}.{{context['task_id']}}.{{context['try_number']}}").touch()
    return 1


def multi_line(context):
    raise RuntimeError("no customer\\n\\tin this run")


with DAG("key_raises", schedule=None):
    work = task(
        task_id="work",
        retries=1,
        retry_delay=0,
        concurrency=sluice.Concurrency(
            "per_customer", key=lambda ctx: ctx["params"]["customer"], limit=2
        ),
    )(body)
    work >> task(task_id="after")(body)

with DAG("key_dict", schedule=None):
    task(
        task_id="work",
        concurrency=sluice.Concurrency(
            "per_customer", key=lambda ctx: {{"customer": "acme"}}, limit=2
        ),
    )(body)

BAD_KEYS = {{
    "empty": lambda ctx: "",
    "too_long": lambda ctx: "k" * 251,
    "newline": lambda ctx: "acme\\nglobex",
    "boolean": lambda ctx: True,
    "none": lambda ctx: None,
    "multi_line": multi_line,
}}

with DAG("bad_keys", schedule=None):
    for name, key in BAD_KEYS.items():
        task(task_id=name, concurrency=sluice.Concurrency("per_customer", key=key))(body)
"""


def env_of(url: str, dags: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLUICE_", "OTEL_"))}
    env.update(SLUICE_DATABASE_URL=url, SLUICE_DAGS_FOLDER=str(dags))
    return env


def cli(tmp_path: Path, url: str, dags: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_sluice(*args, env=env_of(url, dags), timeout=60, cwd=tmp_path)


def keys_in_use(tmp_path: Path, url: str, dags: Path) -> list[Any]:
    """`sluice concurrency list --json`'s keys, against the standalone's database."""
    listed = cli(tmp_path, url, dags, "concurrency", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    keys: list[Any] = json.loads(listed.stdout)["keys"]
    return keys


def task_lines(stderr: str, task_id: str) -> list[str]:
    """The lines standalone printed for `task_id`'s state changes."""
    return [line for line in stderr.splitlines() if re.match(rf"{task_id}\s+[a-z_]+\s", line)]


def folder(tmp_path: Path) -> tuple[Path, Path, str]:
    dags, ran = tmp_path / "dags", tmp_path / "ran"
    dags.mkdir()
    ran.mkdir()
    (dags / "keys.py").write_text(textwrap.dedent(KEYS.format(ran=str(ran))))
    return dags, ran, f"sqlite:///{tmp_path / 'sluice.db'}"


@pytest.mark.parametrize(
    ("dag_id", "error", "tries"),
    [
        pytest.param("key_raises", "KeyError: 'customer'", 2, id="key-raises"),
        pytest.param(
            "key_dict",
            "ValueError: Concurrency 'per_customer': key must be text or an int, got dict",
            1,
            id="key-is-a-dict",
        ),
    ],
)
def test_a_key_function_that_fails_fails_each_try_and_holds_no_key(
    tmp_path: Path, dag_id: str, error: str, tries: int
) -> None:
    # Given a task whose key function raises (no "customer" param) or returns a dict
    dags, ran, url = folder(tmp_path)
    # When the user runs it with `sluice standalone --trigger`
    done = standalone(tmp_path, dags, url, "--trigger", dag_id, "--json")
    # Then every try failed, and the run with them
    assert done.returncode == 1, done.stderr[-3000:]
    document = json.loads(done.stdout)
    assert document["state"] == "failed"
    run_id = document["run_id"]
    assert f"run {run_id}: failed" in done.stderr
    tis = {row["task_id"]: row for row in document["tasks"]}
    assert tis["work"]["state"] == "failed" and tis["work"]["try_number"] == tries
    # the recorded error is one line that names the problem
    assert tis["work"]["error"] == error
    if dag_id == "key_raises":
        assert tis["after"]["state"] == "upstream_failed"
    stored = rows(url, "SELECT task_id, state, try_number, error FROM task_instance")
    assert sorted(stored) == sorted(
        (t, row["state"], row["try_number"], row["error"]) for t, row in tis.items()
    )
    # and standalone said it in one line per try, with the error
    lines = task_lines(done.stderr, "work")
    assert len(lines) == tries, done.stderr[-3000:]
    assert lines[-1].endswith(error) and "failed" in lines[-1], lines
    if tries == 2:
        assert re.match(r"work\s+up_for_retry\s.*try 1 of 2 failed", lines[0]), lines
    # The task's own code never ran: the key comes first
    assert list(ran.iterdir()) == []
    # No key was written, and none is shown as held or waited for
    held = "SELECT concurrency, concurrency_limit, concurrency_key FROM task_instance"
    assert rows(url, f"{held} WHERE task_id = 'work'") == [("per_customer", 2, None)]
    assert keys_in_use(tmp_path, url, dags) == []


def test_every_bad_key_fails_its_try_in_one_line(tmp_path: Path) -> None:
    # Given tasks whose keys are empty, too long, hold a newline, are a bool or None, or
    # whose key function raises with a message of several lines
    dags, ran, url = folder(tmp_path)
    done = standalone(tmp_path, dags, url, "--trigger", "bad_keys", "--json")
    assert done.returncode == 1, done.stderr[-3000:]
    document = json.loads(done.stdout)
    assert document["state"] == "failed"
    errors = {row["task_id"]: (row["state"], row["error"]) for row in document["tasks"]}
    prefix = "ValueError: Concurrency 'per_customer': key must"
    assert errors == {
        "empty": ("failed", f"{prefix} be 1 to 250 characters, got 0"),
        "too_long": ("failed", f"{prefix} be 1 to 250 characters, got 251"),
        "newline": ("failed", f"{prefix} not contain control characters"),
        "boolean": ("failed", f"{prefix} be text or an int, got bool"),
        "none": ("failed", f"{prefix} be text or an int, got NoneType"),
        "multi_line": ("failed", "RuntimeError: no customer in this run"),
    }
    for task_id, (_, error) in errors.items():
        (line,) = task_lines(done.stderr, task_id)
        assert line.endswith(error), line
    assert list(ran.iterdir()) == []
    assert rows(url, "SELECT count(*) FROM task_instance WHERE concurrency_key IS NOT NULL") == [
        (0,)
    ]
    assert keys_in_use(tmp_path, url, dags) == []


GOOD = """
from sluice import DAG, task

with DAG("good", schedule=None):
    task(task_id="only")(lambda: 1)
"""

BROKEN = {
    "key_not_callable.py": (
        'sluice.Concurrency("x", key=1)',
        "Concurrency 'x': key must be a callable",
    ),
    "limit_zero.py": (
        'sluice.RateLimit("api", 0)',
        "RateLimit 'api': limit must be an int from 1 to 1000000, got 0",
    ),
}

BROKEN_DAG = """
import sluice
from sluice import DAG, task

with DAG("{dag_id}", schedule=None):
    @task(concurrency=sluice.Concurrency("per_customer", key=str, limit=2))
    def ok():
        return 1

    LIMIT = {limit}
"""

NOT_A_LIMIT = """
from sluice import DAG, task

with DAG("not_a_limit", schedule=None):
    @task(rate_limit="x")
    def call():
        return 1
"""


def test_a_limit_defined_wrongly_is_one_import_error_line(tmp_path: Path) -> None:
    # Given a DAGs folder with files whose limits are wrong, beside a good DAG
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "good.py").write_text(GOOD)
    for name, (limit, _) in BROKEN.items():
        (dags / name).write_text(BROKEN_DAG.format(dag_id=name.removesuffix(".py"), limit=limit))
    (dags / "not_a_limit.py").write_text(NOT_A_LIMIT)
    expected = {name: error for name, (_, error) in BROKEN.items()}
    expected["not_a_limit.py"] = "task 'call': rate_limit must be a sluice.RateLimit, got 'x'"
    url = f"sqlite:///{tmp_path / 'sluice.db'}"
    # When the user triggers the DAG of a broken file
    refused = standalone(tmp_path, dags, url, "--trigger", "key_not_callable")
    # Then standalone says which file failed and why, in its last line
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert "Traceback" not in refused.stderr
    last = refused.stderr.strip().splitlines()[-1]
    assert last.startswith(f"sluice: error: unknown DAG 'key_not_callable' (not in {dags}); "), last
    assert "key_not_callable.py: Concurrency 'x': key must be a callable" in last, last
    # When the good DAG runs beside the broken files
    done = standalone(tmp_path, dags, url, "--trigger", "good", "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)["state"] == "success"
    for name, error in expected.items():  # each broken file is one warning line
        assert f"DAG file {dags / name} failed: {error}\n" in done.stderr, done.stderr
    # Then `sluice dags list` shows each file's error, one line each
    listed = cli(tmp_path, url, dags, "dags", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    errors = {Path(d["fileloc"]).name: d["import_error"] for d in json.loads(listed.stdout)}
    assert errors == {"good.py": None, **expected}
    shown = cli(tmp_path, url, dags, "dags", "list")
    assert shown.returncode == 0, shown.stderr
    for name, error in expected.items():
        assert f"{name}: {error}\n" in shown.stdout, shown.stdout
    assert rows(url, "SELECT dag_id FROM dag ORDER BY dag_id") == [("good",)]
