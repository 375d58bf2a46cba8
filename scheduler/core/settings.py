"""Settings: one pydantic-settings model, built once from the environment and passed in; nothing
reads config at import.

- Each field `name` is read from the variable `SLUICE_NAME` (`dags_folder` from
  `SLUICE_DAGS_FOLDER`), except the `INTERNAL` ones, which the program sets. A variable
  that is empty (or only spaces) is unset; a value is read without its outer spaces.
- One boolean syntax, pydantic's: `1`/`0`, `true`/`false`, `yes`/`no`, `on`/`off`, in any case.
- A default that depends on another setting follows it (`FOLLOWERS`); a setting that
  conflicts with another is refused only when it was given (`CONFLICTS`), so a default
  alone never stops a daemon.
- `Settings.from_env` turns every bad value into one `ConfigError` line that names its
  variable (the CLI prints it and exits 2). `Settings(...)` reads its arguments only.
"""

from __future__ import annotations

import base64
import logging
import operator
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_core import ErrorDetails
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from sluice.scheduler.core.bundle_specs import BundleSpec, default_bundle, parse_bundles


class ConfigError(ValueError):
    """A setting that cannot be used; the message is one line for the user."""


PREFIX = "SLUICE_"

CONF_DEPTH_CEILING = 200
"""The highest SLUICE_MAX_CONF_DEPTH allowed: pydantic answers no JSON nested 256 levels or
more (a run's conf sits one level inside its answer)."""

TRACE_PLACEHOLDER = "{trace_id}"
"""What SLUICE_TRACE_URL must hold: the UI puts a run's trace id there."""

SECRET_VARIABLES = (
    "SLUICE_DATABASE_URL",
    "SLUICE_BROKER_URL",
    "SLUICE_WAKEUP_URL",
    "SLUICE_RESULT_BACKEND",
    "SLUICE_API_TOKEN",
    "SLUICE_FERNET_KEY",
)
"""The variables that may hold the deployment's credentials: a task's process does not
see them (`broker.worker.task_env`) unless `SLUICE_TASK_ENV_ALLOW` names them."""

INTERNAL = frozenset({"embedded_broker", "broker_url_set"})
"""Fields the program sets, which no variable reads."""

FOLLOWERS = {
    "heartbeat_interval": "heartbeat_timeout",
    "parse_timeout": "heartbeat_timeout",
    "db_retry_max_delay": "db_retry_delay",
    "db_idle_in_tx_timeout": "heartbeat_timeout",
}
"""Field -> the field its default follows (its `default_factory` reads it)."""

Seconds = Annotated[float, Field(gt=0)]
Count = Annotated[int, Field(gt=0)]


def variable(field: str) -> str:
    """The environment variable of `field`: `SLUICE_` and its name in capitals."""
    return PREFIX + field.upper()


def _heartbeat_interval(data: dict[str, Any]) -> float:
    """2 s, or a quarter of the heartbeat timeout when that is less: four beats a timeout."""
    return min(2.0, float(data["heartbeat_timeout"]) / 4)


def _parse_timeout(data: dict[str, Any]) -> float:
    """20 s, or two thirds of the heartbeat timeout when that is less: a worker importing
    a DAG file is never taken for dead."""
    return min(20.0, float(data["heartbeat_timeout"]) * 2 / 3)


def _db_idle_in_tx_timeout(data: dict[str, Any]) -> float:
    """Half the heartbeat timeout: a partitioned process's locks go, and the tries they
    held up beat again, before anyone may be taken for dead."""
    return float(data["heartbeat_timeout"]) / 2


def _db_retry_max_delay(data: dict[str, Any]) -> float:
    """10 s, or the first delay when that is more."""
    return max(10.0, float(data["db_retry_delay"]))


class Settings(BaseSettings):
    """Every tunable of Sluice. Durations are in seconds. Frozen and hashable (a cache key).

    `description` is the field's line in `sluice --help`, followed there by its default
    (a default that follows another setting says so in its description)."""

    model_config = SettingsConfigDict(
        env_prefix=PREFIX, frozen=True, extra="forbid", allow_inf_nan=False
    )

    database_url: str = Field(default="sqlite:///sluice.db", description="database URL")
    broker_url: str = Field(default="redis://localhost:6379/0", description="broker URL")
    dags_folder: Path = Field(default=Path("dags"), description="where the DAG files are")
    dag_bundles: tuple[BundleSpec, ...] | None = Field(
        default=None, description="where DAGs come from, JSON (default: the DAGs folder)"
    )
    """The DAG bundles (`core.bundle_specs`): a git bundle is versioned per commit, a
    folder bundle is not. None: `dags_folder` is the one folder bundle."""
    bundle_cache: Path = Field(
        default_factory=lambda: Path.home() / ".cache" / "sluice" / "bundles",
        description="where git bundles are checked out (~/.cache/sluice/bundles)",
    )
    """Each git bundle's mirror and its checkouts, one folder per commit, shared by every
    process of the host (`core.bundles`)."""
    bundle_cache_versions: Count = Field(default=16, description="checkouts of a git bundle kept")
    """The most recently used checkouts of each git bundle kept in `bundle_cache`."""
    namespace: str = Field(default="sluice", description="prefix of queue names")
    wakeup_url: str | None = Field(
        default=None, description="Redis of the wake-ups (default: the broker's)"
    )
    """The Redis the wake-ups go through; None: the broker's, when it is Redis."""
    result_backend: str | None = Field(
        default=None, description="where CeleryTask results are read from"
    )
    """Celery result backend where CeleryTask results are read (None: CeleryTask cannot run)."""
    log_level: str | None = Field(
        default=None, description="log level (default: daemons INFO, commands WARNING)"
    )
    """A `logging` level name, in capitals; None: by command (`cli.main.log_level`)."""
    heartbeat_timeout: Seconds = Field(default=30.0, description="seconds without heartbeat: dead")
    heartbeat_interval: Seconds = Field(
        default_factory=_heartbeat_interval,
        description="seconds between heartbeats (2, or heartbeat timeout/4 if less)",
    )
    queued_timeout: Seconds = Field(default=60.0, description="seconds queued before a re-publish")
    loop_interval: Seconds = Field(default=1.0, description="longest sleep of a scheduler loop")
    dag_refresh_interval: Seconds = Field(
        default=5.0, description="seconds between DAGs folder scans"
    )
    parse_timeout: Seconds = Field(
        default_factory=_parse_timeout,
        description="seconds to import a DAG file (20, or heartbeat timeout*2/3 if less)",
    )
    """Seconds one DAG file may take to import (parser and worker); below heartbeat_timeout."""
    runs_per_loop: Count = Field(default=100, description="runs a scheduling pass examines")
    """Runs one scheduling pass examines at most; the rest go to the next pass or,
    with several schedulers, to whichever takes them first."""
    schedule_after_task: bool = Field(default=True, description="workers queue the next tasks")
    """Workers decide and queue a finished task's direct downstream themselves
    (`scheduler.decide.downstream`); off, every hop goes through a scheduler pass."""
    db_retry_delay: Seconds = Field(default=0.5, description="first wait for the database")
    """Seconds a daemon waits after its first failed attempt to reach the database (at
    start, or when it goes away), doubled at each attempt up to `db_retry_max_delay`."""
    db_retry_max_delay: Seconds = Field(
        default_factory=_db_retry_max_delay,
        description="longest wait for the database (10, or the first wait if more)",
    )
    """The longest wait between two attempts to reach the database."""
    db_idle_in_tx_timeout: Annotated[float, Field(ge=0)] = Field(
        default_factory=_db_idle_in_tx_timeout,
        description="seconds a session may idle in a transaction (half the heartbeat "
        "timeout; 0: no limit)",
    )
    """PostgreSQL ends a Sluice session that sits this long inside a transaction
    (`idle_in_transaction_session_timeout`, set on each connection unless the URL's
    `options` set it): a process cut off from the database mid-transaction (a partition)
    no longer holds its row locks (pools, runs, its job row) until the server's TCP
    keepalive gives up, hours later. Sluice's own transactions never idle that long."""
    max_map_length: Count = Field(default=10_000, description="most indexes of a mapped task")
    """The deployment's cap on a mapped task's indexes (a task's own max_map_length may
    be lower); an upstream whose output has more fails its try."""
    max_conf_bytes: Count = Field(default=65536, description="largest conf of a run, bytes")
    """Largest conf a run may be given, in bytes of compact UTF-8 JSON (CLI and API)."""
    max_conf_depth: Annotated[int, Field(gt=0, le=CONF_DEPTH_CEILING)] = Field(
        default=32, description="deepest nesting of a run's conf"
    )
    """Deepest nesting of a run's conf (the object itself is level 1, each object or list
    in it one more), CLI and API: what every reader of a conf (JSON, pydantic, the
    databases' JSON) can walk without running out of stack."""
    task_log_max_bytes: Annotated[int, Field(ge=1024)] = Field(
        default=1024 * 1024, description="most bytes of a try's log kept"
    )
    """Most bytes of one try's log kept in the database (the newest lines are kept)."""
    task_log_mirror_bytes: Count = Field(
        default=64 * 1024, description="bytes of a try's output on stdout"
    )
    """Most bytes of one try's output copied to the worker's own stdout."""
    backfill_confirm_runs: Count = Field(
        default=1000, description="a backfill of more runs asks first"
    )
    """A backfill of more runs than this asks first (`--yes` skips the question)."""
    callback_queue: str = Field(default="callbacks", description="the callbacks' queue")
    """The Sluice queue callbacks are delivered on (`sluice worker` consumes it too)."""
    callback_max_attempts: Count = Field(default=5, description="runs of a raising callback")
    """Times a callback that raises is run before it is given up as `failed`."""
    callback_retry_delay: Seconds = Field(
        default=10.0, description="seconds before a callback's rerun"
    )
    """Seconds before a callback that raised runs again, doubled at each attempt."""
    callback_timeout: Seconds = Field(default=300.0, description="seconds a callback may run")
    """Seconds a callback may run: past it, it is stopped (killed after `timeout_grace`)
    and recorded `failed`, timed out, never run again. A running callback whose worker
    stops heartbeating for `heartbeat_timeout` (the worker lost) is run again."""
    timeout_grace: Seconds = Field(default=5.0, description="seconds past a timeout before a kill")
    """Seconds a task or a callback that does not end at its timeout (its code swallows
    the TaskTimeout) may run on before it is killed: its prefork pool process is
    replaced; in the threads pool it is abandoned. Its try fails `(killed)`."""
    base_url: str = Field(
        default="http://127.0.0.1:8080", description="the web UI's address, for callbacks' links"
    )
    """Where the web UI is reached: callbacks' `url` links point there (no final `/`)."""
    api_token: str | None = Field(
        default=None, repr=False, description="the REST API's token for writes"
    )
    api_read_auth: bool = Field(default=False, description="reads need the token too")
    api_max_body_bytes: Count = Field(default=1_048_576, description="largest request body read")
    api_dag_cache_bytes: Count = Field(
        default=64 * 1_048_576, description="the API's cache of DAG versions, bytes"
    )
    trace_url: str | None = Field(
        default=None, description=f"link to a run's trace, with {TRACE_PLACEHOLDER}"
    )
    task_env_allow: frozenset[str] = Field(
        default=frozenset(), description="secret variables tasks may see, comma-separated"
    )
    """The `SECRET_VARIABLES` a task's process may see nevertheless (none by default)."""
    fernet_key: tuple[str, ...] = Field(
        default=(),
        repr=False,
        description="Fernet keys of connections and variables, comma-separated",
    )
    """The keys that encrypt connections and variables in the database
    (`core.fernet`): any of them decrypts, the first encrypts (`sluice secrets rotate`
    re-encrypts every row with it). None: they cannot be stored or read."""
    secrets_backends: tuple[str, ...] = Field(
        default=(), description="secrets backends tasks read, comma-separated, in order"
    )
    """Entry points of the group `sluice.secrets_backends` that `Connection.get` and
    `Variable.get` ask after the environment and before the database, in this order."""
    embedded_broker: bool = False
    """The broker is in this process (`sluice standalone`)."""
    broker_url_set: bool = False
    """Whether `broker_url` was given (SLUICE_BROKER_URL), not the default: a SQLite
    database with no broker given is `sluice standalone`'s, whose broker is in-process."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """The arguments only: the environment is read by `from_env`, of a given mapping
        (a test's) or of this process, and by nothing else."""
        return (init_settings,)

    @field_validator("dag_bundles", mode="before")
    @classmethod
    def _bundles_from_json(cls, value: Any) -> Any:
        return parse_bundles(value) if isinstance(value, str) else value

    @field_validator("base_url")
    @classmethod
    def _without_final_slash(cls, value: str) -> str:
        return value.rstrip("/")

    @field_validator("log_level")
    @classmethod
    def _known_level(cls, value: str | None) -> str | None:
        if value is None:
            return None
        level = value.upper()
        if level not in logging.getLevelNamesMapping():
            raise ValueError("must be DEBUG, INFO, WARNING, ERROR or CRITICAL")
        return level

    @field_validator("trace_url")
    @classmethod
    def _has_placeholder(cls, value: str | None) -> str | None:
        if value is not None and TRACE_PLACEHOLDER not in value:
            raise ValueError(f"must contain {TRACE_PLACEHOLDER}")
        return value

    @field_validator("task_env_allow", mode="before")
    @classmethod
    def _secret_names(cls, value: str | Iterable[str]) -> frozenset[str]:
        """Names separated by commas or spaces (or any iterable of names), each one of
        `SECRET_VARIABLES`."""
        names = frozenset(value.replace(",", " ").split() if isinstance(value, str) else value)
        unknown = sorted(names - set(SECRET_VARIABLES))
        if unknown:
            raise ValueError(
                f"names {', '.join(unknown)}: only {', '.join(SECRET_VARIABLES)} are kept "
                "from tasks, and only these can be given back to them"
            )
        return names

    @field_validator("fernet_key", mode="before")
    @classmethod
    def _fernet_keys(cls, value: str | Iterable[str]) -> tuple[str, ...]:
        """Keys separated by commas (or any iterable of keys), each 32 bytes in URL-safe
        base64, as `Fernet.generate_key()` makes them; checked without importing
        cryptography (a process that never decrypts does not pay for it)."""
        keys = tuple(k.strip() for k in (value.split(",") if isinstance(value, str) else value))
        for number, key in enumerate(keys, start=1):
            if not _is_fernet_key(key):
                which = f"key {number} of {len(keys)}" if len(keys) > 1 else "the key"
                raise ValueError(
                    f"must be Fernet keys separated by commas, and {which} is not one (32 "
                    'bytes in URL-safe base64; make one with `python -c "from '
                    'cryptography.fernet import Fernet; print(Fernet.generate_key().decode())"`)'
                )
        return keys

    @field_validator("secrets_backends", mode="before")
    @classmethod
    def _backend_names(cls, value: str | Iterable[str]) -> tuple[str, ...]:
        """Names separated by commas or spaces (or any iterable of names), in order,
        each once."""
        names = value.replace(",", " ").split() if isinstance(value, str) else list(value)
        return tuple(dict.fromkeys(names))

    @model_validator(mode="after")
    def _no_conflict(self) -> Settings:
        """Refuse a given setting that conflicts with another (`CONFLICTS`): a default
        that follows another setting (`FOLLOWERS`) never does."""
        for field, holds, relation, other, why in CONFLICTS:
            if not holds(getattr(self, field), getattr(self, other)):
                raise ConfigError(f"{self._shown(field)} must {relation} {self._shown(other)}{why}")
        return self

    def _shown(self, field: str) -> str:
        """`SLUICE_NAME (5s)`, or `SLUICE_NAME (30s, the default)` when not given."""
        given = "" if field in self.model_fields_set else ", the default"
        return f"{variable(field)} ({getattr(self, field):g}s{given})"

    @property
    def bundles(self) -> tuple[BundleSpec, ...]:
        """The DAG bundles: SLUICE_DAG_BUNDLES, or the DAGs folder as one folder bundle."""
        return self.dag_bundles or (default_bundle(self.dags_folder),)

    @property
    def fence_after(self) -> float:
        """Seconds a worker lets a try or callback go without reaching the database before
        it stops it (`heartbeat.Beater`): half of `heartbeat_timeout`, so it stops before
        a sweep, a full timeout after the last beat, may take the try over."""
        return self.heartbeat_timeout / 2

    @property
    def hidden_from_tasks(self) -> tuple[str, ...]:
        """The `SECRET_VARIABLES` a task's process, and a DAG file's import, do not see."""
        return tuple(name for name in SECRET_VARIABLES if name not in self.task_env_allow)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """The settings the `SLUICE_*` variables of `env` (default: this process's
        environment) give; ConfigError (one line, naming the variable) for a bad one."""
        env = os.environ if env is None else env
        given: dict[str, Any] = {}
        for field in VARIABLE_FIELDS:
            raw = (env.get(variable(field)) or "").strip()
            if raw:
                given[field] = raw
        given["broker_url_set"] = "broker_url" in given
        return cls._validated(given)

    def with_(self, **changes: Any) -> Settings:
        """These settings with `changes` (validated); a default that follows a changed
        setting follows it again."""
        given = {field: getattr(self, field) for field in self.model_fields_set}
        return self._validated({**given, **changes})

    @classmethod
    def _validated(cls, values: dict[str, Any]) -> Settings:
        try:
            return cls(**values)
        except ValidationError as exc:
            raise ConfigError(one_line(exc)) from None


VARIABLE_FIELDS = tuple(name for name in Settings.model_fields if name not in INTERNAL)
"""The fields read from a variable, in the order `sluice --help` lists them."""

CONFLICTS: tuple[tuple[str, Callable[[Any, Any], bool], str, str, str], ...] = (
    (
        "heartbeat_interval",
        operator.lt,
        "be below",
        "heartbeat_timeout",
        ": a live process would be taken for dead between two heartbeats",
    ),
    (
        "parse_timeout",
        operator.lt,
        "be below",
        "heartbeat_timeout",
        ": a worker importing a DAG file that long would be taken for dead",
    ),
    ("db_retry_max_delay", operator.ge, "not be below", "db_retry_delay", ""),
    (
        "db_idle_in_tx_timeout",
        operator.lt,
        "be below",
        "heartbeat_timeout",
        ": a try held up by a cut-off session's locks would be taken for dead first "
        "(0 turns the limit off)",
    ),
)
"""(field, holds, relation, other, why): `holds(field's value, other's value)` must be
true; else the line is "FIELD (…) must RELATION OTHER (…)WHY". Each `field` is the one
whose default follows `other` (`FOLLOWERS`), so only a given value can break one."""

_KIND = {
    "bool_parsing": "must be true or false (or 1/0, yes/no, on/off)",
    "bool_type": "must be true or false (or 1/0, yes/no, on/off)",
    "float_parsing": "must be a number of seconds",
    "float_type": "must be a number of seconds",
    "finite_number": "must be a finite number of seconds",
    "int_parsing": "must be a whole number",
    "int_type": "must be a whole number",
    "int_from_float": "must be a whole number",
    "greater_than": "must be positive",
}


def one_line(exc: ValidationError) -> str:
    """The first problem of `exc` as one line that names its variable."""
    errors = [e for e in exc.errors() if e["type"] != "default_factory_not_called"]
    error: ErrorDetails = (errors or exc.errors())[0]
    ctx = error.get("ctx") or {}
    if not error["loc"]:  # a model validator's line names its settings
        return str(ctx.get("error") or error["msg"])
    name = variable(str(error["loc"][0]))
    if error["type"] == "extra_forbidden":
        return f"{name} is not a setting"
    if isinstance(ctx.get("error"), ValueError):
        what = str(ctx["error"])
    elif error["type"] in _KIND:
        what = _KIND[error["type"]]
    elif "ge" in ctx:
        what = f"must be at least {ctx['ge']}"
    elif "le" in ctx:
        what = f"must be at most {ctx['le']}"
    else:
        what = f"is not valid ({error['msg']})"
    if name in SECRET_VARIABLES:
        return f"{name} {what}"  # a secret's value is never shown
    return f"{name} {what}, got {_bounded(error['input'])}"


def _is_fernet_key(key: str) -> bool:
    try:
        return len(base64.urlsafe_b64decode(key.encode("ascii"))) == 32
    except (ValueError, UnicodeEncodeError):
        return False


def _bounded(value: object, limit: int = 80) -> str:
    """`repr(value)`, cut to `limit` characters: a line, whatever was given."""
    shown = repr(value)
    return shown if len(shown) <= limit else f"{shown[: limit - 4]}...{shown[-1]}"


DEFAULTS = Settings()
"""The settings no variable changes (no environment is read): where a function's own
default is a setting's default."""
