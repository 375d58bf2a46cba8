"""Issue 39, findings 4.3 and 4.4 with a real scheduler and real `sluice worker`s.

4.3 "a task timeout can be swallowed": a body with `except Exception` in a loop fails at
its timeout all the same; one that swallows everything (`except BaseException`) is
killed `SLUICE_TIMEOUT_GRACE` seconds later, its try fails with `timed out after N s
(killed)`, its retry runs, and the prefork pool replaces the killed process. In the
threads pool, where a thread cannot be killed, the try is recorded the same way and its
thread abandoned. 4.4 "a running callback is run twice": a callback past its time limit
is not published again while its worker lives; it runs once and is recorded timed out.
Each body appends its pool process's pid to a file per start, so a second start shows.
"""

from __future__ import annotations

import datetime as dt
import textwrap
from pathlib import Path
from typing import Any

from tests.integration.test_cancel_run import rows
from tests.procs import Sluice, wait_until

HELPERS = """
MARKS = Path({marks!r})


def started(name):
    with open(MARKS / name, "a") as out:
        out.write(f"{{os.getpid()}}\\n")


def loop(seconds, swallowed):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            time.sleep(0.05)
        except swallowed:
            pass
"""
"""What both DAG files define: where they note their starts, and a loop that swallows."""

SWALLOWS = (
    """
import os
import time
from datetime import timedelta
from pathlib import Path
from sluice import DAG, task
"""
    + HELPERS
    + """

with DAG("swallows", schedule=None) as dag:
    @task(execution_timeout=timedelta(seconds=2))
    def catches_exception():
        started("catches_exception")
        loop(30, Exception)

    @task(execution_timeout=timedelta(seconds=2), retries=1, retry_delay=0)
    def catches_everything():
        started("catches_everything")
        loop(30, BaseException)

    @task(trigger_rule="all_done")
    def after():
        started("after")

    [catches_exception, catches_everything] >> after
"""
)


def db(sluice: Sluice, sql: str) -> list[Any]:
    """The rows of `sql` in the test's database."""
    return rows(sluice.database_url, sql)


def pids(marks: Path, name: str) -> list[int]:
    path = marks / name
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def setup(sluice: Sluice, tmp_path: Path, dags: str) -> Path:
    marks = tmp_path / "marks"
    marks.mkdir()
    (sluice.dags_folder / "bodies.py").write_text(textwrap.dedent(dags.format(marks=str(marks))))
    sluice.extra_env["SLUICE_TIMEOUT_GRACE"] = "1"
    sluice.run("dags", "list")
    return marks


def tries(sluice: Sluice, task_id: str) -> list[tuple[int, str, float]]:
    """(try_number, state, seconds it ran) of each ended try of `task_id`, first first."""
    earlier = db(
        sluice,
        "SELECT p.try_number, p.state, p.start_date, p.end_date FROM task_try p "
        f"JOIN task_instance t ON t.id = p.ti_id WHERE t.task_id = '{task_id}'",
    )
    last = db(
        sluice,
        "SELECT try_number, state, start_date, end_date FROM task_instance "
        f"WHERE task_id = '{task_id}' AND end_date IS NOT NULL",
    )
    return sorted((n, str(s), (end - start).total_seconds()) for n, s, start, end in earlier + last)


def test_a_swallowed_task_timeout_fails_then_is_killed_and_retried(
    sluice: Sluice, tmp_path: Path
) -> None:
    """4.3: with one prefork pool process, `except Exception` does not keep a try past
    its 2 s timeout; `except BaseException` keeps it 1 s more (the grace), then the
    process is killed and replaced: each try of the retried task fails `(killed)`, once,
    and the next task runs on the new process."""
    marks = setup(sluice, tmp_path, SWALLOWS)
    sluice.scheduler()
    sluice.worker(concurrency=1)
    run_id = sluice.trigger("swallows")
    assert sluice.wait_run("swallows", run_id, timeout=40) == "success"  # `after`, the leaf
    states = sluice.db_task_states("swallows", run_id)

    caught = states["catches_exception"]
    assert caught["state"] == "failed"
    assert caught["error"] == "TaskTimeout: task 'catches_exception' timed out after 2s"
    [(_, _, ran)] = tries(sluice, "catches_exception")
    assert ran < 2 + 1  # at its timeout, not at its grace's end

    everything = states["catches_everything"]
    assert (everything["state"], everything["try_number"]) == ("failed", 2)
    killed = "TaskTimeout: task 'catches_everything' timed out after 2 s (killed)"
    assert everything["error"] == killed
    both = tries(sluice, "catches_everything")
    assert [(n, s) for n, s, _ in both] == [(1, "up_for_retry"), (2, "failed")]
    assert all(2 + 1 - 0.5 < ran < 2 + 1 + 2 for _, _, ran in both), both
    # the retry ran, each try in a pool process of its own: the killed one was replaced
    first, second = pids(marks, "catches_everything")
    [after] = pids(marks, "after")
    assert len({first, second, after}) == 3
    assert states["after"]["state"] == "success"
    # the kill was the worker's own, not the heartbeat sweep's
    worker_log = "".join(p.read_text() for p in sluice.log_dir.glob("worker-*.log"))
    assert worker_log.count("killing this pool process") == 2
    assert "heartbeat" not in (everything["error"] or "")


CALLBACKS = (
    """
import os
import time
from pathlib import Path
from sluice import DAG, task
"""
    + HELPERS
    + """

def slow_alert(context):
    started("slow_alert")
    loop(30, Exception)


def stubborn_alert(context):
    started("stubborn_alert")
    loop(30, BaseException)


def quick_alert(context):
    started("quick_alert")


def fails():
    raise ValueError("boom")


with DAG("slow", schedule=None) as slow:
    task(task_id="fails", on_failure_callback=slow_alert)(fails)

with DAG("stubborn", schedule=None) as stubborn:
    task(task_id="fails", on_failure_callback=stubborn_alert)(fails)

with DAG("quick", schedule=None) as quick:
    task(task_id="fails", on_failure_callback=quick_alert)(fails)
"""
)


def callback_rows(sluice: Sluice) -> dict[str, tuple[str, str | None, int]]:
    """status, error and attempts of each DAG's callback."""
    found = db(sluice, "SELECT dag_id, status, error, attempts FROM callback")
    return {dag_id: (str(status), error, attempts) for dag_id, status, error, attempts in found}


def test_a_callback_past_its_limit_runs_once_and_is_recorded_timed_out(
    sluice: Sluice, tmp_path: Path
) -> None:
    """4.4 (and 4.3 for callbacks): with a 2 s callback timeout, a callback that swallows
    `Exception` is stopped at 2 s; one that swallows everything is killed 1 s later; the
    scheduler, which used to publish a running callback again past the callback timeout,
    leaves both to their heartbeating worker: each starts once, is recorded failed and
    timed out, never retried; the worker's killed process is replaced and goes on."""
    marks = setup(sluice, tmp_path, CALLBACKS)
    sluice.extra_env.update(SLUICE_CALLBACK_TIMEOUT="2", SLUICE_CALLBACK_MAX_ATTEMPTS="3")
    sluice.scheduler()
    sluice.worker(concurrency=1)  # one pool process: the next callback runs in its heir
    slow, stubborn = sluice.trigger("slow"), sluice.trigger("stubborn")
    assert sluice.wait_run("slow", slow) == sluice.wait_run("stubborn", stubborn) == "failed"

    def ended() -> dict[str, tuple[str, str | None, int]] | None:
        found = callback_rows(sluice)
        return (
            found
            if {found.get("slow", ("",))[0], found.get("stubborn", ("",))[0]} == {"failed"}
            else None
        )

    found = wait_until(ended, timeout=20)
    assert found["slow"] == (
        "failed",
        f"TaskTimeout: callback on_failure of slow.{slow}.fails timed out after 2s",
        1,
    )
    assert found["stubborn"] == (
        "failed",
        f"TaskTimeout: callback on_failure of stubborn.{stubborn}.fails timed out after 2 s "
        "(killed)",
        1,
    )
    # each started once (the callbacks are over: a failed one is never published again)
    assert len(pids(marks, "slow_alert")) == 1
    [killed] = pids(marks, "stubborn_alert")
    # the worker goes on: a new callback runs, in the pool process started after the kill
    quick = sluice.trigger("quick")
    assert sluice.wait_run("quick", quick) == "failed"
    wait_until(lambda: callback_rows(sluice).get("quick", ("",))[0] == "delivered", timeout=20)
    [ran] = pids(marks, "quick_alert")
    assert ran != killed
    [(started, finished)] = db(
        sluice,
        "SELECT started_at, finished_at FROM callback WHERE dag_id = 'stubborn'",
    )
    assert finished - started < dt.timedelta(seconds=2 + 1 + 2)


THREADS = """
import os
import time
from datetime import timedelta
from pathlib import Path
from sluice import DAG, task

MARKS = Path({marks!r})


def started(name):
    with open(MARKS / name, "a") as out:
        out.write(f"{{os.getpid()}}\\n")


with DAG("abandoned", schedule=None) as dag:
    @task(execution_timeout=timedelta(seconds=1))
    def catches_everything():
        started("catches_everything")
        end = time.monotonic() + 20
        while time.monotonic() < end:
            try:
                time.sleep(0.05)
            except BaseException:
                pass
        started("catches_everything_returned")

    @task(trigger_rule="all_done")
    def after():
        started("after")

    catches_everything >> after
"""


def test_in_the_threads_pool_a_swallowing_try_is_failed_and_abandoned(
    sluice: Sluice, tmp_path: Path
) -> None:
    """4.3 where a thread cannot be killed (`--pool threads`, as `sluice standalone`'s
    embedded worker runs tasks): the try is recorded failed `(abandoned)` at its timeout
    plus the grace, its thread left running, and the worker runs the next task."""
    marks = setup(sluice, tmp_path, THREADS)
    sluice.scheduler()
    sluice.start("worker", "worker", "-Q", "default", "-c", "2", "--pool", "threads")
    run_id = sluice.trigger("abandoned")
    assert sluice.wait_run("abandoned", run_id, timeout=30) == "success"
    ti = sluice.db_task_states("abandoned", run_id)["catches_everything"]
    assert ti["state"] == "failed"
    assert ti["error"] == (
        "TaskTimeout: task 'catches_everything' timed out after 1 s "
        "(abandoned: a thread cannot be killed)"
    )
    [(_, _, ran)] = tries(sluice, "catches_everything")
    assert 1 + 1 - 0.5 < ran < 1 + 1 + 2
    assert pids(marks, "after") and not pids(marks, "catches_everything_returned")
