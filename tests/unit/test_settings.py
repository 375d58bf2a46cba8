"""Settings from the environment: defaults, parsing, and one clear error per bad value."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from sluice.scheduler.api.config import ApiConfig
from sluice.scheduler.cli.environment import epilog
from sluice.scheduler.core.settings import (
    CONFLICTS,
    FOLLOWERS,
    VARIABLE_FIELDS,
    ConfigError,
    Settings,
    variable,
)


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


def test_a_default_that_depends_on_another_setting_follows_it() -> None:
    """Issue 40: SLUICE_HEARTBEAT_TIMEOUT=5 alone was refused, the parse timeout's default
    (20 s) not being below it. The parse timeout's and the heartbeat interval's defaults
    follow the heartbeat timeout; the longest database wait follows the first."""
    default = Settings.from_env({})
    assert (default.heartbeat_interval, default.parse_timeout) == (2, 20)
    assert default.db_retry_max_delay == 10

    short = Settings.from_env({"SLUICE_HEARTBEAT_TIMEOUT": "5"})
    assert short.heartbeat_interval < short.parse_timeout < short.heartbeat_timeout == 5
    assert Settings(heartbeat_timeout=5).parse_timeout == short.parse_timeout
    assert default.with_(heartbeat_timeout=3).parse_timeout == 2
    given = Settings.from_env({"SLUICE_PARSE_TIMEOUT": "2.5"})
    assert given.with_(heartbeat_timeout=3).parse_timeout == 2.5  # a given value stays
    assert Settings.from_env({"SLUICE_DB_RETRY_DELAY": "20"}).db_retry_max_delay == 20


def test_only_a_given_setting_that_conflicts_is_refused_in_one_line() -> None:
    """The line names both settings, and says which one is a default."""
    cases = {
        (("SLUICE_HEARTBEAT_TIMEOUT", "5"), ("SLUICE_PARSE_TIMEOUT", "5")): (
            "SLUICE_PARSE_TIMEOUT (5s) must be below SLUICE_HEARTBEAT_TIMEOUT (5s): "
            "a worker importing a DAG file that long would be taken for dead"
        ),
        (("SLUICE_PARSE_TIMEOUT", "40"),): (
            "SLUICE_PARSE_TIMEOUT (40s) must be below SLUICE_HEARTBEAT_TIMEOUT (30s, the "
            "default): a worker importing a DAG file that long would be taken for dead"
        ),
        (("SLUICE_HEARTBEAT_TIMEOUT", "1"), ("SLUICE_HEARTBEAT_INTERVAL", "1")): (
            "SLUICE_HEARTBEAT_INTERVAL (1s) must be below SLUICE_HEARTBEAT_TIMEOUT (1s): "
            "a live process would be taken for dead between two heartbeats"
        ),
        (("SLUICE_DB_RETRY_MAX_DELAY", "0.2"), ("SLUICE_DB_RETRY_DELAY", "0.3")): (
            "SLUICE_DB_RETRY_MAX_DELAY (0.2s) must not be below SLUICE_DB_RETRY_DELAY (0.3s)"
        ),
    }
    for env, line in cases.items():
        with pytest.raises(ConfigError) as refused:
            Settings.from_env(dict(env))
        assert str(refused.value) == line
    with pytest.raises(ConfigError, match=r"SLUICE_PARSE_TIMEOUT \(20s\) must be below"):
        Settings(parse_timeout=20).with_(heartbeat_timeout=10)


def test_one_boolean_syntax_for_every_switch() -> None:
    """Issue 40: two parsers, "true or false" in one place and "1 or 0" in another
    (SLUICE_API_READ_AUTH=1). One now, for every boolean setting, in any case."""
    switches = [name for name in VARIABLE_FIELDS if Settings.model_fields[name].annotation is bool]
    assert {"schedule_after_task", "api_read_auth"} <= set(switches)
    for name in switches:
        for raw, value in [("1", True), ("true", True), ("Yes", True), (" ON ", True)] + [
            ("0", False),
            ("FALSE", False),
            ("no", False),
            ("off", False),
        ]:
            assert getattr(Settings.from_env({variable(name): raw}), name) is value, raw
        with pytest.raises(ConfigError) as refused:
            Settings.from_env({variable(name): "maybe"})
        assert str(refused.value) == (
            f"{variable(name)} must be true or false (or 1/0, yes/no, on/off), got 'maybe'"
        )


def test_every_bad_value_is_one_line_that_names_its_variable() -> None:
    cases = {
        "SLUICE_HEARTBEAT_TIMEOUT": ("x", "must be a number of seconds, got 'x'"),
        "SLUICE_LOOP_INTERVAL": ("nan", "must be a finite number of seconds, got 'nan'"),
        "SLUICE_QUEUED_TIMEOUT": ("-1", "must be positive, got '-1'"),
        "SLUICE_MAX_MAP_LENGTH": ("1e3", "must be a whole number, got '1e3'"),
        "SLUICE_MAX_CONF_DEPTH": ("300", "must be at most 200, got '300'"),
        "SLUICE_LOG_LEVEL": ("loud", "must be DEBUG, INFO, WARNING, ERROR or CRITICAL, got 'loud'"),
        "SLUICE_TRACE_URL": ("http://t/", "must contain {trace_id}, got 'http://t/'"),
        "SLUICE_API_MAX_BODY_BYTES": ("1MB", "must be a whole number, got '1MB'"),
    }
    for name, (raw, what) in cases.items():
        with pytest.raises(ConfigError) as refused:
            Settings.from_env({name: raw})
        line = str(refused.value)
        assert line == f"{name} {what}"
    with pytest.raises(ConfigError) as refused:  # hostile input: still one short line
        Settings.from_env({"SLUICE_TRACE_URL": "http://t/\n" * 1000})
    assert "\n" not in str(refused.value) and len(str(refused.value)) < 150


def test_constructing_settings_reads_no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """`Settings(...)` is its arguments and the defaults; only `from_env` reads variables."""
    monkeypatch.setenv("SLUICE_NAMESPACE", "elsewhere")
    assert Settings().namespace == "sluice"
    assert Settings(database_url="sqlite://").namespace == "sluice"
    assert Settings.from_env().namespace == "elsewhere"
    with pytest.raises(ValidationError):
        Settings(no_such_setting=1)  # type: ignore[call-arg]


def test_settings_are_frozen_and_a_cache_key() -> None:
    settings = Settings.from_env({"SLUICE_HEARTBEAT_TIMEOUT": "5"})
    with pytest.raises(ValidationError):
        settings.namespace = "changed"
    assert {settings: 1}[Settings.from_env({"SLUICE_HEARTBEAT_TIMEOUT": "5"})] == 1
    assert Settings.from_env({}) == Settings()
    assert "s3cret" not in repr(Settings(api_token="s3cret"))


def test_sluice_help_is_generated_from_the_settings() -> None:
    """Issue 40: the list of `sluice --help` was written by hand beside the settings."""
    lines = epilog().splitlines()
    listed = [line.split()[0] for line in lines[1:]]
    assert listed == [variable(name) for name in VARIABLE_FIELDS] + ["OTEL_*"]
    assert "SLUICE_BROKER_URL_SET" not in epilog()  # set by the program, not a variable
    assert "  SLUICE_HEARTBEAT_TIMEOUT      seconds without heartbeat: dead (30)" in lines
    assert "  SLUICE_SCHEDULE_AFTER_TASK    workers queue the next tasks (true)" in lines
    assert all(Settings.model_fields[name].description for name in VARIABLE_FIELDS)


def test_the_readme_configuration_table_names_every_setting() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    table = readme.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(SLUICE_[A-Z_]+)` \|", table, flags=re.MULTILINE)
    assert sorted(rows) == sorted(variable(name) for name in VARIABLE_FIELDS)


def test_the_api_takes_its_settings_from_the_one_model() -> None:
    settings = Settings.from_env(
        {
            "SLUICE_API_TOKEN": " s3 ",
            "SLUICE_API_READ_AUTH": "yes",
            "SLUICE_TRACE_URL": "x/{trace_id}",
        }
    )
    assert ApiConfig.from_settings(settings) == ApiConfig(
        token="s3", read_auth=True, trace_url="x/{trace_id}"
    )
    assert ApiConfig.from_settings(Settings()) == ApiConfig()


def test_a_following_default_never_conflicts_whatever_it_follows() -> None:
    """Every setting a default follows (`FOLLOWERS`), given alone at any positive value,
    starts: a refusal needs a given value on both sides, or a given follower."""
    assert {field for field, *_ in CONFLICTS} == set(FOLLOWERS)
    for follower, leader in FOLLOWERS.items():
        assert Settings.model_fields[follower].default_factory is not None
        for raw in ("0.001", "0.3", "1", "5", "29", "31", "1000", "1e6"):
            settings = Settings.from_env({variable(leader): raw})
            assert getattr(settings, follower) > 0, (follower, raw)
