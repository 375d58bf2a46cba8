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
