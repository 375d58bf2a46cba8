"""Settings as a daemon meets them: a default follows the setting it depends on, and only
two settings the user gave that conflict stop `sluice`, with one line and exit code 2."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.procs import Sluice, run_sluice

FOLLOWERS = ("SLUICE_PARSE_TIMEOUT", "SLUICE_HEARTBEAT_INTERVAL")
"""The settings whose defaults follow SLUICE_HEARTBEAT_TIMEOUT: the `sluice` fixture sets
them, these tests leave them to their defaults."""


def _scheduler_once(sluice: Sluice, **env: str) -> subprocess.CompletedProcess[str]:
    """`sluice scheduler --num-loops 1` with the fixture's environment but `FOLLOWERS`
    unset, plus `env`."""
    given = {k: v for k, v in sluice.env.items() if k not in FOLLOWERS} | env
    return run_sluice(
        "scheduler", "--num-loops", "1", env=given, timeout=60, cwd=sluice.dags_folder.parent
    )


def test_a_short_heartbeat_timeout_alone_starts_a_scheduler(sluice: Sluice) -> None:
    """Issue 40: `SLUICE_HEARTBEAT_TIMEOUT=5` alone made every daemon exit ("SLUICE_PARSE_
    TIMEOUT (20s) must be below SLUICE_HEARTBEAT_TIMEOUT (5s)"): the parse timeout's and
    the heartbeat interval's defaults follow the heartbeat timeout now."""
    sluice.ok("db", "migrate")

    done = _scheduler_once(sluice, SLUICE_HEARTBEAT_TIMEOUT="5")

    assert done.returncode == 0, done.stderr
    assert "SLUICE_PARSE_TIMEOUT" not in done.stderr


def test_two_given_settings_that_conflict_are_one_line_and_exit_2(sluice: Sluice) -> None:
    done = _scheduler_once(sluice, SLUICE_HEARTBEAT_TIMEOUT="5", SLUICE_PARSE_TIMEOUT="5")

    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "sluice: error: SLUICE_PARSE_TIMEOUT (5s) must be below SLUICE_HEARTBEAT_TIMEOUT "
        "(5s): a worker importing a DAG file that long would be taken for dead"
    ]


def test_a_bad_log_level_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """SLUICE_LOG_LEVEL was read beside the settings, unchecked: `loud` was a traceback
    from `logging`. It is a setting now, checked with the others."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLUICE_", "OTEL_"))}
    env.update(SLUICE_LOG_LEVEL="loud", SLUICE_DATABASE_URL=f"sqlite:///{tmp_path / 's.db'}")

    done = run_sluice("dags", "list", env=env, timeout=60)

    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "sluice: error: SLUICE_LOG_LEVEL must be DEBUG, INFO, WARNING, ERROR or CRITICAL, "
        "got 'loud'"
    ]
