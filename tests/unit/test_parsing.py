"""parse_files: one subprocess for a batch, one result (or one-line error) per file."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sluice.tasks.parsing import parse_files
from sluice.tasks.serialize import version_hash

GOOD = """
from datetime import datetime, timezone
from sluice import DAG, task
from helper_mod import ROWS

print("user output on stdout must not break the protocol")
with DAG("{dag_id}", schedule="@daily", start_date=datetime(2026, 1, 1, tzinfo=timezone.utc)):
    @task
    def a():
        return ROWS

    @task
    def b():
        pass

    a >> b
"""

CYCLE = """
from sluice import DAG, task
with DAG("cyclic"):
    @task
    def x(): pass
    @task
    def y(): pass
    x >> y >> x
"""


def write(folder: Path, name: str, body: str) -> str:
    path = folder / name
    path.write_text(textwrap.dedent(body))
    return str(path)


def test_batch_with_every_kind_of_outcome(tmp_path: Path) -> None:
    write(tmp_path, "helper_mod.py", "ROWS = 3\n")
    good = write(tmp_path, "good.py", GOOD.format(dag_id="good"))
    syntax = write(tmp_path, "syntax.py", "from sluice import DAG\n\ndef broken(:\n    pass\n")
    missing = write(tmp_path, "missing.py", "import os\nimport no_such_module_xyz  # dag\n")
    cycle = write(tmp_path, "cycle.py", CYCLE)
    dup = write(tmp_path, "dup.py", GOOD.format(dag_id="good"))
    slow = write(tmp_path, "slow.py", "import time  # dag\nwhile True:\n    time.sleep(0.01)\n")
    after = write(tmp_path, "after.py", GOOD.format(dag_id="after_slow"))
    absent = str(tmp_path / "absent.py")

    paths = [good, syntax, missing, cycle, dup, slow, after, absent]
    results = parse_files(paths, timeout=0.5)

    assert set(results) == set(paths)
    assert results[good]["error"] is None
    (spec,) = results[good]["dags"]
    assert spec["dag_id"] == "good" and spec["fileloc"] == good
    assert spec["tasks"]["a"]["downstream"] == ["b"] and spec["schedule"] == "@daily"
    assert len(version_hash(spec)) == 64
    assert results[syntax] == {
        "dags": [],
        "error": "SyntaxError: invalid syntax (syntax.py, line 3)",
    }
    assert results[missing]["error"] == (
        "ModuleNotFoundError: No module named 'no_such_module_xyz' (missing.py, line 2)"
    )
    assert results[cycle]["error"] == "cycle in DAG 'cyclic': x >> y >> x"
    assert results[dup] == {"dags": [], "error": f"dag_id 'good' already defined in {good}"}
    assert results[slow] == {"dags": [], "error": "timed out after 0.5s"}
    assert results[after]["error"] is None and results[after]["dags"][0]["dag_id"] == "after_slow"
    assert results[absent]["error"] == (
        f"FileNotFoundError: [Errno 2] No such file or directory: '{absent}' (absent.py)"
    )
    for result in results.values():
        assert result["error"] is None or "\n" not in result["error"]


def test_definition_errors_during_import(tmp_path: Path) -> None:
    outside = write(tmp_path, "outside.py", "from sluice import task\n@task\ndef f(): pass\n")
    naive = write(
        tmp_path,
        "naive.py",
        "from datetime import datetime\nfrom sluice import DAG\n"
        "DAG('n', schedule='@daily', start_date=datetime(2026, 1, 1))\n",
    )
    write(tmp_path, "bad_helper.py", "X = 1\nY = X / 0\n")
    in_helper = write(tmp_path, "in_helper.py", "# dag\nimport bad_helper\n")
    exits = write(tmp_path, "exits.py", "# dag\nimport sys\nsys.exit('bye')\n")
    results = parse_files([outside, naive, in_helper, exits], timeout=5)
    assert "outside a DAG" in str(results[outside]["error"])
    assert "naive" in str(results[naive]["error"])
    assert (
        results[in_helper]["error"] == "ZeroDivisionError: division by zero (bad_helper.py, line 2)"
    )
    assert results[exits]["error"] == "SystemExit: bye (exits.py, line 3)"


def test_a_file_killing_the_parser_fails_alone(tmp_path: Path) -> None:
    body = GOOD.replace("from helper_mod import ROWS", "ROWS = 1")
    first = write(tmp_path, "first.py", body.format(dag_id="first"))
    killer = write(tmp_path, "killer.py", "import os  # dag\nos._exit(7)\n")
    later = write(tmp_path, "later.py", body.format(dag_id="later"))
    again = write(tmp_path, "again.py", body.format(dag_id="first"))
    results = parse_files([first, killer, later, again], timeout=5)
    assert results[first]["error"] is None
    assert results[killer] == {
        "dags": [],
        "error": "DAG parser process exited with code 7 on this file",
    }
    assert results[later]["error"] is None and results[later]["dags"][0]["dag_id"] == "later"
    assert results[again]["error"] == f"dag_id 'first' already defined in {first}"


def test_a_celery_projects_tasks_py_beside_the_dag_is_never_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Celery's tutorial keeps the app in tasks.py; Sluice is `sluice.*`, never `tasks`."""
    write(tmp_path, "tasks.py", "raise RuntimeError('the user tasks.py was imported')\n")
    dag_file = write(tmp_path, "dags_here.py", "from sluice import DAG\nDAG('shadow_free')\n")
    monkeypatch.chdir(tmp_path)
    results = parse_files([dag_file, "dags_here.py"], timeout=5)
    assert results[dag_file]["error"] is None
    assert results[dag_file]["dags"][0]["dag_id"] == "shadow_free"
    assert "already defined" in str(results["dags_here.py"]["error"])  # same file, relative


def test_empty_batch() -> None:
    assert parse_files([], timeout=1) == {}


def test_a_file_printing_a_flood_costs_the_parser_s_caller_no_memory(tmp_path: Path) -> None:
    """A DAG file printing 200 MB at import: parsing it keeps only a bounded tail of the
    output (it was buffered whole: 1.5 GB of RSS for 300 MB), and the DAG is parsed."""
    flood = write(
        tmp_path,
        "flood.py",
        "import sys\nfrom sluice import DAG\n"
        "for _ in range(200):\n    sys.stdout.write('x' * 1_000_000)\nDAG('flooded')\n",
    )
    quiet = write(tmp_path, "quiet.py", "from sluice import DAG\nDAG('quiet')\n")
    probe = (  # the peak before the flood is the baseline (imports, a first .pyc compile)
        "import json, resource, sys\n"
        "from sluice.tasks.parsing import parse_files\n"
        "def peak(): return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024\n"
        "parse_files([sys.argv[2]], timeout=30)\n"
        "before = peak()\n"
        "result = parse_files([sys.argv[1]], timeout=30)[sys.argv[1]]\n"
        "print(json.dumps({'result': result, 'peak_mb': peak() - before}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(flood), str(quiet)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["result"]["error"] is None
    assert [d["dag_id"] for d in report["result"]["dags"]] == ["flooded"]
    assert report["peak_mb"] < 50  # the caller's own growth, whatever the file printed
