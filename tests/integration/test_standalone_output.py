"""What `sluice standalone --trigger` prints by default, as a user meets it first (the
README's first command): one line per task state change in human words, warnings and
errors, then the table; Celery's `received`/`succeeded` lines, attempt ids and the
worker's result-path names only with `-v`."""

from __future__ import annotations

import os
import re
import subprocess
import textwrap
from pathlib import Path

from sluice.broker.worker.result.paths import PATHS
from tests.procs import run_sluice

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "dags"

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")

UPS_AND_DOWNS = """
from datetime import timedelta
from pathlib import Path
from sluice import DAG, task

MARKS = Path({marks!r})


def fails_once(context):
    mark = MARKS / f"{{context['task_id']}}-failed-once"
    if not mark.exists():
        mark.touch()
        raise RuntimeError("first try fails")
    return "ok"


def broken():
    raise ValueError("broken for good")


with DAG("ups", schedule=None) as dag:
    task(task_id="flaky", retries=1, retry_delay=timedelta(seconds=8))(fails_once)
    task(task_id="quick", retries=1, retry_delay=timedelta(0))(fails_once)
    task(task_id="broken")(broken) >> task(task_id="after")(lambda: 1)
"""


def run_standalone(cwd: Path, dags: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`sluice standalone ARGS` in `cwd` as the README runs it: no setting but the DAGs
    folder, so on the default database (`sluice.db` in `cwd`)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLUICE_", "OTEL_"))}
    env.update(SLUICE_DAGS_FOLDER=str(dags), SLUICE_LOOP_INTERVAL="0.2")
    return run_sluice("standalone", *args, env=env, cwd=cwd, timeout=120)


def task_lines(stderr: str, task_id: str) -> list[str]:
    """The lines of stderr that start with `task_id` and a state."""
    return [line for line in stderr.splitlines() if re.match(rf"{task_id}\s+[a-z_]+\b", line)]


def test_standalone_trigger_prints_one_human_line_per_task_not_celery_internals(
    tmp_path: Path,
) -> None:
    """Finding: the README's first command printed 27 log lines before its table
    (Celery's received/succeeded, attempt ids, "fan_in_at_once, then nothing")."""
    # When the user runs the README's first command on a fresh machine (no database)
    done = run_standalone(tmp_path, EXAMPLES, "--trigger", "example_etl")
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "sluice.db").exists()  # the default database, created
    # Then stderr has no Celery INFO line, no attempt id and no result-path name
    err = done.stderr
    assert " received" not in err and "succeeded in" not in err, err
    assert UUID.search(err) is None, err
    for path in PATHS:
        assert path.name not in err, (path.name, err)
    assert "then nothing" not in err and "INFO" not in err.replace("INFO sluice.tasks.shell", ""), (
        err
    )
    # but one line per task, with its state (and its duration when it ran)
    for task_id in ("extract", "total", "biggest", "check", "report", "done"):
        (line,) = task_lines(err, task_id)
        assert re.fullmatch(rf"{task_id}\s+success\s+\d+\.\d\ds", line), line
    (line,) = task_lines(err, "alert")
    assert re.fullmatch(r"alert\s+skipped", line), line
    # what the tasks print is still there, and the table is printed as before
    assert "the branch chose 'report'" in err
    assert done.stdout.startswith("task_id"), done.stdout
    assert "run manual__" in done.stdout and done.stdout.rstrip().endswith(": success")
    assert re.search(r"(?m)^alert\s+skipped\s+0\s+default", done.stdout), done.stdout


def test_standalone_verbose_shows_the_internal_lines_again(tmp_path: Path) -> None:
    # When the user asks for them with -v
    done = run_standalone(tmp_path, EXAMPLES, "--trigger", "example_etl", "-v")
    assert done.returncode == 0, done.stderr[-3000:]
    # Then Celery's lines, the attempt ids and the result paths are back, beside the
    # per-task lines
    err = done.stderr
    assert "Task example_etl.extract[" in err and "received" in err, err
    assert "succeeded in" in err and UUID.search(err) is not None
    assert any(path.name in err for path in PATHS), err
    (line,) = task_lines(err, "extract")
    assert re.fullmatch(r"extract\s+success\s+\d+\.\d\ds", line), line


def test_standalone_says_retries_and_failures_in_one_line_each(tmp_path: Path) -> None:
    # Given a task that fails once then succeeds, one that fails for good, and its
    # downstream
    dags, marks = tmp_path / "dags", tmp_path / "marks"
    dags.mkdir()
    marks.mkdir()
    (dags / "ups.py").write_text(textwrap.dedent(UPS_AND_DOWNS.format(marks=str(marks))))
    # When it runs in standalone
    done = run_standalone(tmp_path, dags, "--trigger", "ups")
    # Then the run failed, and each state change is one line in words
    assert done.returncode == 1, done.stderr[-3000:]
    err = done.stderr
    retry, success = task_lines(err, "flaky")
    # (the retry is due 8 s after the failure was seen, a few ms before the try's end
    # was stamped: the line says the time left from its end; 8 s, not less, so that a
    # busy machine reads the TI before it is reopened, as `quick`'s below is not: at
    # 4 s, one CI run of a loaded machine read it late)
    assert re.fullmatch(
        r"flaky\s+up_for_retry\s+\d+\.\d\ds\s+try 1 of 2 failed, retrying in "
        r"(8\.00|7\.9\d)s: RuntimeError: first try fails",
        retry,
    ), retry
    assert re.fullmatch(r"flaky\s+success\s+\d+\.\d\ds", success), success
    # a retry due at once, its TI reopened before it was read, is said all the same
    retry, success = task_lines(err, "quick")
    assert re.fullmatch(r"quick\s+up_for_retry\s+\d+\.\d\ds\s+try 1 of 2 failed.*", retry)
    assert re.fullmatch(r"quick\s+success\s+\d+\.\d\ds", success), success
    (failed,) = task_lines(err, "broken")
    assert re.fullmatch(r"broken\s+failed\s+\d+\.\d\ds\s+ValueError: broken for good", failed), (
        failed
    )
    (after,) = task_lines(err, "after")
    assert re.fullmatch(r"after\s+upstream_failed", after), after
    # the failures' warnings (with their tracebacks) are still printed
    assert "WARNING" in err and "Traceback" in err
    assert done.stdout.rstrip().endswith(": failed")
