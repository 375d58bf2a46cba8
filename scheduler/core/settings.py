"""Settings, built once from the environment and passed in; nothing reads config at import."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar


class ConfigError(ValueError):
    """A setting that cannot be used; the message is one line for the user."""


_N = TypeVar("_N", int, float)


def _positive(
    env: Mapping[str, str], name: str, default: _N, parse: Callable[[str], _N], kind: str
) -> _N:
    """A positive number from `env[name]` (`default` when unset or empty)."""
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = parse(raw)
    except ValueError:
        raise ConfigError(f"{name} must be {kind}, got {raw!r}") from None
    if value <= 0:
        raise ConfigError(f"{name} must be positive, got {raw!r}")
    return value


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    return _positive(env, name, default, float, "a number of seconds")


def env_int(env: Mapping[str, str], name: str, default: int) -> int:
    """A positive whole number from `env[name]`, `default` when unset; else ConfigError."""
    return _positive(env, name, default, int, "a whole number")


CONF_DEPTH_CEILING = 200
"""The highest SLUICE_MAX_CONF_DEPTH allowed: pydantic answers no JSON nested 256 levels or
more (a run's conf sits one level inside its answer)."""


_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


def _bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = (env.get(name) or "").strip().lower()
    if raw == "":
        return default
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise ConfigError(f"{name} must be true or false, got {env.get(name)!r}")


SECRET_VARIABLES = (
    "SLUICE_DATABASE_URL",
    "SLUICE_BROKER_URL",
    "SLUICE_WAKEUP_URL",
    "SLUICE_RESULT_BACKEND",
    "SLUICE_API_TOKEN",
)
"""The variables that may hold the deployment's credentials: a task's process does not
see them (`broker.worker.task_env`) unless `SLUICE_TASK_ENV_ALLOW` names them."""


def _names(env: Mapping[str, str], name: str, allowed: tuple[str, ...]) -> frozenset[str]:
    """Variable names listed in `env[name]` (separated by commas or spaces), each one of
    `allowed`; else ConfigError."""
    names = frozenset((env.get(name) or "").replace(",", " ").split())
    unknown = sorted(names - set(allowed))
    if unknown:
        raise ConfigError(
            f"{name} names {', '.join(unknown)}: only {', '.join(allowed)} are kept from "
            "tasks, and only these can be given back to them"
        )
    return names


@dataclass(frozen=True)
class Settings:
    """Every tunable of Sluice. Durations are in seconds."""

    database_url: str = "sqlite:///sluice.db"
    broker_url: str = "redis://localhost:6379/0"
    dags_folder: Path = Path("dags")
    namespace: str = "sluice"
    heartbeat_timeout: float = 30.0
    queued_timeout: float = 60.0
    loop_interval: float = 1.0
    heartbeat_interval: float = 2.0
    parse_timeout: float = 20.0
    """Seconds one DAG file may take to import (parser and worker); below heartbeat_timeout."""
    dag_refresh_interval: float = 5.0
    runs_per_loop: int = 100
    """Runs one scheduling pass examines at most; the rest go to the next pass or,
    with several schedulers, to whichever takes them first."""
    embedded_broker: bool = False
    broker_url_set: bool = False
    """Whether `broker_url` was given (SLUICE_BROKER_URL), not the default: a SQLite
    database with no broker given is `sluice standalone`'s, whose broker is in-process."""
    result_backend: str | None = None
    """Celery result backend where CeleryTask results are read (None: CeleryTask cannot run)."""
    schedule_after_task: bool = True
    """Workers decide and queue a finished task's direct downstream themselves
    (`scheduler.scheduling.downstream`); off, every hop goes through a scheduler pass."""
    max_conf_bytes: int = 65536
    """Largest conf a run may be given, in bytes of compact UTF-8 JSON (CLI and API)."""
    max_conf_depth: int = 32
    """Deepest nesting of a run's conf (the object itself is level 1, each object or list
    in it one more), CLI and API: what every reader of a conf (JSON, pydantic, the
    databases' JSON) can walk without running out of stack."""
    task_log_max_bytes: int = 1024 * 1024
    """Most bytes of one try's log kept in the database (the newest lines are kept)."""
    task_log_mirror_bytes: int = 64 * 1024
    """Most bytes of one try's output copied to the worker's own stdout."""
    backfill_confirm_runs: int = 1000
    """A backfill of more runs than this asks first (`--yes` skips the question)."""
    callback_queue: str = "callbacks"
    """The Sluice queue callbacks are delivered on (`sluice worker` consumes it too)."""
    callback_max_attempts: int = 5
    """Times a callback that raises is run before it is given up as `failed`."""
    callback_retry_delay: float = 10.0
    """Seconds before a callback that raised runs again, doubled at each attempt."""
    callback_timeout: float = 300.0
    """Seconds a callback may run: past it, it is stopped (killed after `timeout_grace`)
    and recorded `failed`, timed out, never run again. A running callback whose worker
    stops heartbeating for `heartbeat_timeout` (the worker lost) is run again."""
    timeout_grace: float = 5.0
    """Seconds a task or a callback that does not end at its timeout (its code swallows
    the TaskTimeout) may run on before it is killed: its prefork pool process is
    replaced; in the threads pool it is abandoned. Its try fails `(killed)`."""
    max_map_length: int = 10_000
    """The deployment's cap on a mapped task's indexes (a task's own max_map_length may
    be lower); an upstream whose output has more fails its try."""
    base_url: str = "http://127.0.0.1:8080"
    """Where the web UI is reached: callbacks' `url` links point there."""
    wakeup_url: str | None = None
    """The Redis the wake-ups go through; None: the broker's, when it is Redis."""
    db_retry_delay: float = 0.5
    """Seconds a daemon waits after its first failed attempt to reach the database (at
    start, or when it goes away), doubled at each attempt up to `db_retry_max_delay`."""
    db_retry_max_delay: float = 10.0
    """The longest wait between two attempts to reach the database."""
    task_env_allow: frozenset[str] = frozenset()
    """The `SECRET_VARIABLES` a task's process may see nevertheless (none by default)."""

    @property
    def hidden_from_tasks(self) -> tuple[str, ...]:
        """The `SECRET_VARIABLES` a task's process, and a DAG file's import, do not see."""
        return tuple(name for name in SECRET_VARIABLES if name not in self.task_env_allow)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        base = cls()
        settings = cls(
            database_url=env.get("SLUICE_DATABASE_URL") or base.database_url,
            broker_url=env.get("SLUICE_BROKER_URL") or base.broker_url,
            broker_url_set=bool(env.get("SLUICE_BROKER_URL")),
            dags_folder=Path(env.get("SLUICE_DAGS_FOLDER") or base.dags_folder),
            namespace=env.get("SLUICE_NAMESPACE") or base.namespace,
            heartbeat_timeout=_float(env, "SLUICE_HEARTBEAT_TIMEOUT", base.heartbeat_timeout),
            queued_timeout=_float(env, "SLUICE_QUEUED_TIMEOUT", base.queued_timeout),
            loop_interval=_float(env, "SLUICE_LOOP_INTERVAL", base.loop_interval),
            heartbeat_interval=_float(env, "SLUICE_HEARTBEAT_INTERVAL", base.heartbeat_interval),
            parse_timeout=_float(env, "SLUICE_PARSE_TIMEOUT", base.parse_timeout),
            dag_refresh_interval=_float(
                env, "SLUICE_DAG_REFRESH_INTERVAL", base.dag_refresh_interval
            ),
            runs_per_loop=env_int(env, "SLUICE_RUNS_PER_LOOP", base.runs_per_loop),
            result_backend=env.get("SLUICE_RESULT_BACKEND") or base.result_backend,
            schedule_after_task=_bool(env, "SLUICE_SCHEDULE_AFTER_TASK", base.schedule_after_task),
            max_conf_bytes=env_int(env, "SLUICE_MAX_CONF_BYTES", base.max_conf_bytes),
            max_conf_depth=env_int(env, "SLUICE_MAX_CONF_DEPTH", base.max_conf_depth),
            task_log_max_bytes=env_int(env, "SLUICE_TASK_LOG_MAX_BYTES", base.task_log_max_bytes),
            task_log_mirror_bytes=env_int(
                env, "SLUICE_TASK_LOG_MIRROR_BYTES", base.task_log_mirror_bytes
            ),
            backfill_confirm_runs=env_int(
                env, "SLUICE_BACKFILL_CONFIRM_RUNS", base.backfill_confirm_runs
            ),
            callback_queue=env.get("SLUICE_CALLBACK_QUEUE") or base.callback_queue,
            callback_max_attempts=env_int(
                env, "SLUICE_CALLBACK_MAX_ATTEMPTS", base.callback_max_attempts
            ),
            callback_retry_delay=_float(
                env, "SLUICE_CALLBACK_RETRY_DELAY", base.callback_retry_delay
            ),
            callback_timeout=_float(env, "SLUICE_CALLBACK_TIMEOUT", base.callback_timeout),
            timeout_grace=_float(env, "SLUICE_TIMEOUT_GRACE", base.timeout_grace),
            base_url=(env.get("SLUICE_BASE_URL") or base.base_url).rstrip("/"),
            wakeup_url=env.get("SLUICE_WAKEUP_URL") or base.wakeup_url,
            max_map_length=env_int(env, "SLUICE_MAX_MAP_LENGTH", base.max_map_length),
            db_retry_delay=_float(env, "SLUICE_DB_RETRY_DELAY", base.db_retry_delay),
            db_retry_max_delay=_float(env, "SLUICE_DB_RETRY_MAX_DELAY", base.db_retry_max_delay),
            task_env_allow=_names(env, "SLUICE_TASK_ENV_ALLOW", SECRET_VARIABLES),
        )
        if settings.db_retry_max_delay < settings.db_retry_delay:
            raise ConfigError(
                f"SLUICE_DB_RETRY_MAX_DELAY ({settings.db_retry_max_delay:g}s) must not be below "
                f"SLUICE_DB_RETRY_DELAY ({settings.db_retry_delay:g}s)"
            )
        if settings.max_map_length < 1:
            raise ConfigError(
                f"SLUICE_MAX_MAP_LENGTH must be at least 1, got {settings.max_map_length}"
            )
        if settings.max_conf_depth > CONF_DEPTH_CEILING:
            raise ConfigError(
                f"SLUICE_MAX_CONF_DEPTH must be at most {CONF_DEPTH_CEILING} (a deeper conf "
                f"could not be answered as JSON), got {settings.max_conf_depth}"
            )
        if settings.task_log_max_bytes < 1024:
            raise ConfigError(
                "SLUICE_TASK_LOG_MAX_BYTES must be at least 1024, "
                f"got {settings.task_log_max_bytes}"
            )
        if settings.parse_timeout >= settings.heartbeat_timeout:
            raise ConfigError(
                f"SLUICE_PARSE_TIMEOUT ({settings.parse_timeout:g}s) must be below "
                f"SLUICE_HEARTBEAT_TIMEOUT ({settings.heartbeat_timeout:g}s): a worker "
                "importing a DAG file that long would be taken for dead"
            )
        return settings

    def with_(self, **changes: object) -> Settings:
        return replace(self, **changes)  # type: ignore[arg-type]
