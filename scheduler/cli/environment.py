"""The environment variables Sluice reads, for the epilog of `sluice --help`.

Invariant: every `SLUICE_*` variable that the settings (`core.settings`), the CLI and the
REST API read is named here (`tests/integration/test_first_hour.py` checks it against
their source); the README's Configuration table says more of each.
"""

from __future__ import annotations

VARIABLES: tuple[tuple[str, str], ...] = (
    ("SLUICE_DATABASE_URL", "database URL (default sqlite:///sluice.db)"),
    ("SLUICE_BROKER_URL", "broker URL (default redis://localhost:6379/0)"),
    ("SLUICE_DAGS_FOLDER", "where the DAG files are (default ./dags)"),
    ("SLUICE_NAMESPACE", "prefix of queue names (default sluice)"),
    ("SLUICE_WAKEUP_URL", "Redis of the wake-ups (default: the broker's)"),
    ("SLUICE_RESULT_BACKEND", "where CeleryTask results are read from"),
    ("SLUICE_LOG_LEVEL", "log level (daemons INFO, commands WARNING)"),
    ("SLUICE_HEARTBEAT_TIMEOUT", "seconds without heartbeat: dead (30)"),
    ("SLUICE_HEARTBEAT_INTERVAL", "seconds between heartbeats (2)"),
    ("SLUICE_QUEUED_TIMEOUT", "seconds queued before a re-publish (60)"),
    ("SLUICE_LOOP_INTERVAL", "longest sleep of a scheduler loop (1)"),
    ("SLUICE_DAG_REFRESH_INTERVAL", "seconds between DAGs folder scans (5)"),
    ("SLUICE_PARSE_TIMEOUT", "seconds a DAG file may take to import (20)"),
    ("SLUICE_RUNS_PER_LOOP", "runs a scheduling pass examines (100)"),
    ("SLUICE_SCHEDULE_AFTER_TASK", "workers queue the next tasks (true)"),
    ("SLUICE_DB_RETRY_DELAY", "first wait for the database (0.5)"),
    ("SLUICE_DB_RETRY_MAX_DELAY", "longest wait for the database (10)"),
    ("SLUICE_MAX_MAP_LENGTH", "most indexes of a mapped task (10000)"),
    ("SLUICE_MAX_CONF_BYTES", "largest conf of a run, bytes (65536)"),
    ("SLUICE_MAX_CONF_DEPTH", "deepest nesting of a run's conf (32)"),
    ("SLUICE_TASK_LOG_MAX_BYTES", "most bytes of a try's log kept (1 MiB)"),
    ("SLUICE_TASK_LOG_MIRROR_BYTES", "bytes of a try's output on stdout (64 KiB)"),
    ("SLUICE_BACKFILL_CONFIRM_RUNS", "a backfill of more runs asks first (1000)"),
    ("SLUICE_CALLBACK_QUEUE", "the callbacks' queue (callbacks)"),
    ("SLUICE_CALLBACK_MAX_ATTEMPTS", "runs of a raising callback (5)"),
    ("SLUICE_CALLBACK_RETRY_DELAY", "seconds before a callback's rerun (10)"),
    ("SLUICE_CALLBACK_TIMEOUT", "seconds a callback may run (300)"),
    ("SLUICE_TIMEOUT_GRACE", "seconds past a timeout before a kill (5)"),
    ("SLUICE_BASE_URL", "the web UI's address, for callbacks' links"),
    ("SLUICE_API_TOKEN", "the REST API's token for writes"),
    ("SLUICE_TASK_ENV_ALLOW", "secret variables tasks may see (none)"),
    ("SLUICE_API_READ_AUTH", "1: reads need the token too"),
    ("SLUICE_API_MAX_BODY_BYTES", "largest request body read (1 MiB)"),
    ("SLUICE_API_DAG_CACHE_BYTES", "the API's cache of DAG versions (64 MiB)"),
    ("SLUICE_TRACE_URL", "link to a run's trace ({trace_id})"),
    ("OTEL_*", "OpenTelemetry exporters (traces, metrics)"),
)


def epilog() -> str:
    """The names and what each sets, one line each, aligned."""
    width = max(len(name) for name, _ in VARIABLES)
    lines = [f"  {name.ljust(width)}  {meaning}" for name, meaning in VARIABLES]
    head = "environment variables (read at start; the README's Configuration says more):"
    return "\n".join([head, *lines])
