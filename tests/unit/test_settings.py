"""Settings from the environment: defaults, parsing, and one clear error per bad value."""

from __future__ import annotations

import pytest

from sluice.scheduler.core.settings import ConfigError, Settings


def test_schedule_after_task_is_on_by_default_and_can_be_turned_off() -> None:
    assert Settings.from_env({}).schedule_after_task is True
    for off in ("false", "0", "No", " off "):
        assert Settings.from_env({"SLUICE_SCHEDULE_AFTER_TASK": off}).schedule_after_task is False
    assert Settings.from_env({"SLUICE_SCHEDULE_AFTER_TASK": "TRUE"}).schedule_after_task is True


def test_bad_values_are_one_line_errors() -> None:
    with pytest.raises(ConfigError, match="SLUICE_SCHEDULE_AFTER_TASK must be true or false"):
        Settings.from_env({"SLUICE_SCHEDULE_AFTER_TASK": "maybe"})
    with pytest.raises(ConfigError, match="SLUICE_LOOP_INTERVAL must be a number"):
        Settings.from_env({"SLUICE_LOOP_INTERVAL": "soon"})
    for bad in ("many", "2.5", "0"):
        with pytest.raises(ConfigError, match="SLUICE_RUNS_PER_LOOP must be"):
            Settings.from_env({"SLUICE_RUNS_PER_LOOP": bad})


def test_runs_per_loop_from_the_environment() -> None:
    assert Settings.from_env({}).runs_per_loop == 100
    assert Settings.from_env({"SLUICE_RUNS_PER_LOOP": "20"}).runs_per_loop == 20


def test_the_parse_timeout_must_be_below_the_heartbeat_timeout() -> None:
    """A worker importing a DAG file for longer than the heartbeat timeout would be taken for
    dead: `sluice` refuses to start with one line naming both settings."""
    assert Settings.from_env({}).parse_timeout < Settings.from_env({}).heartbeat_timeout
    env = {"SLUICE_PARSE_TIMEOUT": "30", "SLUICE_HEARTBEAT_TIMEOUT": "30"}
    with pytest.raises(ConfigError, match=r"SLUICE_PARSE_TIMEOUT \(30s\) must be below "):
        Settings.from_env(env)
    assert Settings.from_env({**env, "SLUICE_HEARTBEAT_TIMEOUT": "31"}).parse_timeout == 30


def test_the_limits_of_task_logs_and_backfills_are_settings() -> None:
    default = Settings.from_env({})
    assert (default.task_log_max_bytes, default.task_log_mirror_bytes) == (1 << 20, 64 << 10)
    assert default.backfill_confirm_runs == 1000
    given = Settings.from_env(
        {
            "SLUICE_TASK_LOG_MAX_BYTES": "4096",
            "SLUICE_TASK_LOG_MIRROR_BYTES": "100",
            "SLUICE_BACKFILL_CONFIRM_RUNS": "5",
        }
    )
    assert (given.task_log_max_bytes, given.task_log_mirror_bytes) == (4096, 100)
    assert given.backfill_confirm_runs == 5
    with pytest.raises(ConfigError, match="SLUICE_TASK_LOG_MAX_BYTES must be at least 1024"):
        Settings.from_env({"SLUICE_TASK_LOG_MAX_BYTES": "10"})


def test_the_database_retry_back_off_is_a_setting() -> None:
    """0.5 s doubling to 10 s by default; the longest delay may not be below the first."""
    from sluice.scheduler.core.db_wait import Backoff

    default = Backoff(Settings.from_env({}))
    assert [default.take() for _ in range(7)] == [0.5, 1, 2, 4, 8, 10, 10]
    default.reset()
    assert default.take() == 0.5
    env = {"SLUICE_DB_RETRY_DELAY": "0.1", "SLUICE_DB_RETRY_MAX_DELAY": "0.3"}
    short = Backoff(Settings.from_env(env))
    assert [short.take() for _ in range(3)] == [0.1, 0.2, 0.3]
    with pytest.raises(ConfigError, match=r"SLUICE_DB_RETRY_MAX_DELAY \(0.05s\) must not be"):
        Settings.from_env({**env, "SLUICE_DB_RETRY_MAX_DELAY": "0.05"})
    with pytest.raises(ConfigError, match="SLUICE_DB_RETRY_DELAY must be positive"):
        Settings.from_env({"SLUICE_DB_RETRY_DELAY": "0"})


def test_the_grace_after_a_timeout_is_a_setting() -> None:
    """Issue 39, 4.3: a body still running 5 s (SLUICE_TIMEOUT_GRACE) after its timeout
    is killed."""
    assert Settings.from_env({}).timeout_grace == 5.0
    assert Settings.from_env({"SLUICE_TIMEOUT_GRACE": "0.5"}).timeout_grace == 0.5
    with pytest.raises(ConfigError, match="SLUICE_TIMEOUT_GRACE must be positive"):
        Settings.from_env({"SLUICE_TIMEOUT_GRACE": "0"})
