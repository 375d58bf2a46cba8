"""Typed SQLAlchemy 2.0 models: the tables of docs/architecture.md (Data model).

Models hold data only: they never open sessions or commit. State columns are
written only through `scheduler.core.transitions`.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from sluice.scheduler.core.db import UtcDateTime
from sluice.scheduler.core.states import (
    DagRunState,
    JobState,
    RunType,
    SpanStatus,
    TaskInstanceState,
)

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

OPEN_SPANS = f"span_status IN ('{SpanStatus.ACTIVE.value}', '{SpanStatus.SHOULD_END.value}')"
"""SQL: a run whose span is open (its starting job must end it or hand it on). Written
inline, the condition of `ix_dag_run_open_spans` and of the reads it serves, so that any
plan of those reads can use the partial index."""

DEFAULT_POOL = "default_pool"
DEFAULT_POOL_SLOTS = 128

ID = BigInteger().with_variant(Integer, "sqlite")


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {dt.datetime: UtcDateTime, dict[str, Any]: JSON}


class Dag(Base):
    """A DAG as last parsed from its file; `serialized` is what schedulers work from."""

    __tablename__ = "dag"

    dag_id: Mapped[str] = mapped_column(String(250), primary_key=True)
    fileloc: Mapped[str] = mapped_column(Text)
    is_paused: Mapped[bool] = mapped_column(Boolean, default=False)
    is_active: Mapped[bool] = mapped_column(Boolean, default=True)
    schedule: Mapped[str | None] = mapped_column(String(250))
    next_dagrun: Mapped[dt.datetime | None]
    next_dagrun_create_after: Mapped[dt.datetime | None]
    version_hash: Mapped[str] = mapped_column(String(64))
    import_error: Mapped[str | None] = mapped_column(Text)
    serialized: Mapped[dict[str, Any]]
    task_order: Mapped[str | None] = mapped_column(Text, deferred=True)
    """The task ids in the API's topological order, a JSON array (`scheduling.shapes`);
    NULL for a DAG recorded before migration 0014."""
    tasks_detail: Mapped[str | None] = mapped_column(Text, deferred=True)
    """The DAG detail's task list as JSON, in `task_order` (`scheduling.shapes`)."""
    max_active_runs: Mapped[int] = mapped_column(Integer, default=16)
    max_active_tasks: Mapped[int] = mapped_column(Integer, default=32)
    last_parsed_at: Mapped[dt.datetime | None]
    bundle_version: Mapped[str | None] = mapped_column(String(40))
    """Of a git bundle's DAG: the commit it was last parsed at, which a new run keeps
    (`dag_run.bundle_version`); NULL for a folder bundle's (not versioned)."""
    version_id: Mapped[int | None] = mapped_column(ID)
    """Of a git bundle's DAG: its `dag_version` row as parsed at `bundle_version`."""

    __table_args__ = (Index("ix_dag_due", "is_paused", "next_dagrun_create_after"),)


class DagVersion(Base):
    """A version of a git bundle's DAG: recorded for each commit that changed the DAG (its
    file or its definition), and for any commit a run was asked for (`--version`).
    `serialized` is the DAG at that commit; `fileloc` is `bundle://<bundle>/<path>`."""

    __tablename__ = "dag_version"

    id: Mapped[int] = mapped_column(ID, primary_key=True, autoincrement=True)
    dag_id: Mapped[str] = mapped_column(String(250))
    bundle: Mapped[str] = mapped_column(String(64))
    commit_sha: Mapped[str] = mapped_column(String(40))
    version_hash: Mapped[str] = mapped_column(String(64))
    source_hash: Mapped[str] = mapped_column(String(64))
    """sha256 of the DAG file's bytes: a new body for a task is a new version."""
    fileloc: Mapped[str] = mapped_column(Text)
    serialized: Mapped[dict[str, Any]]
    author: Mapped[str] = mapped_column(String(250))
    committed_at: Mapped[dt.datetime]
    subject: Mapped[str] = mapped_column(Text)
    created_at: Mapped[dt.datetime]

    __table_args__ = (
        UniqueConstraint("dag_id", "commit_sha", name="uq_dag_version_dag_id_commit_sha"),
        Index("ix_dag_version_dag_hash", "dag_id", "version_hash"),
    )


class Trigger(Base):
    """What a deferred TI waits on (`tasks.triggers`): its trigger's class and arguments,
    the try it resumes (`attempt_id`), its deadline, and the triggerer that runs it
    (`triggerer_id`, until `lease_until`: past it, another triggerer takes it over).
    Written with the TI's move to `deferred`, deleted with its resume or its failure."""

    __tablename__ = "trigger"

    id: Mapped[int] = mapped_column(ID, primary_key=True, autoincrement=True)
    ti_id: Mapped[int] = mapped_column(
        ID, ForeignKey("task_instance.id", ondelete="CASCADE"), unique=True
    )
    attempt_id: Mapped[str] = mapped_column(String(36))
    classpath: Mapped[str] = mapped_column(String(1000))
    kwargs: Mapped[dict[str, Any]]
    created_at: Mapped[dt.datetime]
    timeout_at: Mapped[dt.datetime | None]
    triggerer_id: Mapped[int | None] = mapped_column(ID)
    lease_until: Mapped[dt.datetime | None]

    __table_args__ = (Index("ix_trigger_lease_until", "lease_until"),)


class Event(Base):
    """An event sent on a key (`sluice events send`, `POST /api/v1/events`). It resumes
    the TIs deferred on `Event(key)` when it is sent; kept, it also resumes a TI that
    defers on the key later, if the TI's run was queued before the event was sent
    (`queries.events`)."""

    __tablename__ = "event"

    id: Mapped[int] = mapped_column(ID, primary_key=True, autoincrement=True)
    key: Mapped[str] = mapped_column(String(250))
    payload: Mapped[dict[str, Any]]
    """A JSON object (`{}` when none was sent): the resumed try's `context["trigger_event"]`."""
    sent_at: Mapped[dt.datetime]

    __table_args__ = (Index("ix_event_key_sent_at", "key", "sent_at"),)


class Asset(Base):
    """An asset (`sluice.Asset`): named by a DAG's schedule or a task's outlets when its
    DAG is recorded, or by the first event sent on it."""

    __tablename__ = "asset"

    uri: Mapped[str] = mapped_column(String(1000), primary_key=True)
    name: Mapped[str | None] = mapped_column(String(250))
    created_at: Mapped[dt.datetime]


class AssetEvent(Base):
    """An asset's update: written by a producing task's success (in the result's
    transaction, `source_*` its TI) or sent from outside (`source_*` NULL)."""

    __tablename__ = "asset_event"

    id: Mapped[int] = mapped_column(ID, primary_key=True, autoincrement=True)
    uri: Mapped[str] = mapped_column(String(1000))
    extra: Mapped[dict[str, Any]]
    source_dag_id: Mapped[str | None] = mapped_column(String(250))
    source_run_id: Mapped[str | None] = mapped_column(String(250))
    source_task_id: Mapped[str | None] = mapped_column(String(250))
    source_map_index: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[dt.datetime]

    __table_args__ = (Index("ix_asset_event_uri_id", "uri", "id"),)


class DagAsset(Base):
    """Who uses an asset, as each DAG's latest version says: `role` "consumes" (the
    DAG's schedule names it; `task_id` '') or "produces" (`task_id` lists it in its
    outlets). Rewritten when the DAG's version changes."""

    __tablename__ = "dag_asset"

    dag_id: Mapped[str] = mapped_column(String(250), primary_key=True)
    role: Mapped[str] = mapped_column(String(10), primary_key=True)
    task_id: Mapped[str] = mapped_column(String(250), primary_key=True)
    uri: Mapped[str] = mapped_column(String(1000), primary_key=True)

    __table_args__ = (Index("ix_dag_asset_uri_role", "uri", "role"),)


class AssetQueue(Base):
    """An asset event a consuming DAG has not consumed yet: written with the event (one
    row per DAG whose schedule names its asset), deleted by the run that consumes it
    (under the DAG's row lock): each event triggers each DAG at most once."""

    __tablename__ = "asset_queue"

    dag_id: Mapped[str] = mapped_column(String(250), primary_key=True)
    event_id: Mapped[int] = mapped_column(
        ID, ForeignKey("asset_event.id", ondelete="CASCADE"), primary_key=True
    )


class DagWatch(Base):
    """A watched DAG's state (`sluice.Watch`): when it is due, its cursor, its last
    evaluation and error, and the triggerer evaluating it (`lease_owner` until
    `lease_until`: past it, another triggerer may)."""

    __tablename__ = "dag_watch"

    dag_id: Mapped[str] = mapped_column(String(250), primary_key=True)
    next_eval_at: Mapped[dt.datetime]
    cursor: Mapped[str | None] = mapped_column(Text)
    last_eval_at: Mapped[dt.datetime | None]
    last_error: Mapped[str | None] = mapped_column(Text)
    """The last evaluation's error (raised, hung, bad request); NULL once one works."""
    error_at: Mapped[dt.datetime | None]
    evaluations: Mapped[int] = mapped_column(Integer, default=0)
    lease_owner: Mapped[int | None] = mapped_column(ID)
    lease_until: Mapped[dt.datetime | None]


class WatchKey(Base):
    """A run key a watch yielded and the run it made: at most one run per key, ever."""

    __tablename__ = "watch_key"

    dag_id: Mapped[str] = mapped_column(String(250), primary_key=True)
    run_key: Mapped[str] = mapped_column(String(1000), primary_key=True)
    run_id: Mapped[str] = mapped_column(String(250))
    created_at: Mapped[dt.datetime]


class BundleState(Base):
    """What the schedulers last fetched of a git bundle, and since when its fetch fails."""

    __tablename__ = "bundle_state"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    head_commit: Mapped[str | None] = mapped_column(String(40))
    """The commit of the bundle's ref last parsed."""
    fetched_at: Mapped[dt.datetime | None]
    """The last fetch that worked."""
    failing_since: Mapped[dt.datetime | None]
    """The first of the fetches failing since the last that worked; NULL when it works."""
    error: Mapped[str | None] = mapped_column(Text)


class DagFile(Base):
    """One file of the DAGs folder: its fingerprint and, if it failed, why."""

    __tablename__ = "dag_file"

    fileloc: Mapped[str] = mapped_column(String(1000), primary_key=True)
    mtime_ns: Mapped[int] = mapped_column(BigInteger)
    size: Mapped[int] = mapped_column(BigInteger)
    import_error: Mapped[str | None] = mapped_column(Text)
    parsed_at: Mapped[dt.datetime]


class DagRun(Base):
    __tablename__ = "dag_run"

    id: Mapped[int] = mapped_column(ID, primary_key=True, autoincrement=True)
    dag_id: Mapped[str] = mapped_column(String(250), ForeignKey("dag.dag_id"))
    run_id: Mapped[str] = mapped_column(String(250))
    logical_date: Mapped[dt.datetime]
    run_type: Mapped[RunType] = mapped_column(String(20))
    state: Mapped[DagRunState] = mapped_column(String(20), default=DagRunState.QUEUED)
    conf: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    dag_hash: Mapped[str] = mapped_column(String(64))
    queued_at: Mapped[dt.datetime | None]
    start_date: Mapped[dt.datetime | None]
    end_date: Mapped[dt.datetime | None]
    claimed_by_job_id: Mapped[int | None] = mapped_column(ID)
    last_scheduling_decision: Mapped[dt.datetime | None]
    started_by_job_id: Mapped[int | None] = mapped_column(ID)
    context_carrier: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    span_status: Mapped[SpanStatus] = mapped_column(String(20), default=SpanStatus.NOT_STARTED)
    callback_mask: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    """Which of the run's ends have a DAG callback (`core.callback_kinds.BITS`)."""
    deadline_at: Mapped[dt.datetime | None]
    """When the run misses its DAG's deadline if still unfinished; NULL once fired."""
    bundle_version: Mapped[str | None] = mapped_column(String(40))
    """The commit whose code every try of the run runs (a git bundle's DAG); NULL: the
    DAG's current file (a folder bundle's)."""
    dag_version_id: Mapped[int | None] = mapped_column(ID)
    """The `dag_version` the run follows (with `bundle_version`; NULL for a folder)."""
    triggering_events: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON)
    """Of an asset-triggered run: the asset events it consumed, as its tasks'
    `context["triggering_asset_events"]` shows them; NULL for other runs."""

    __table_args__ = (
        UniqueConstraint("dag_id", "run_id", name="uq_dag_run_dag_id_run_id"),
        UniqueConstraint("dag_id", "logical_date", name="uq_dag_run_dag_id_logical_date"),
        Index("ix_dag_run_state_decision", "state", "last_scheduling_decision"),
        Index("ix_dag_run_dag_state", "dag_id", "state"),
        Index("ix_dag_run_deadline_at", "deadline_at"),
        Index(  # a dead job's runs whose spans are open: read without the history
            "ix_dag_run_open_spans",
            "started_by_job_id",
            postgresql_where=text(OPEN_SPANS),
            sqlite_where=text(OPEN_SPANS),
        ),
    )


_WAITS_FOR_A_LIMIT = (
    "state = 'scheduled' AND (concurrency_key IS NOT NULL OR rate_limit IS NOT NULL)"
)
"""A TI waiting for a concurrency key's slot or a rate limit's token (`decide.limited`)."""


class TaskInstance(Base):
    __tablename__ = "task_instance"

    id: Mapped[int] = mapped_column(ID, primary_key=True, autoincrement=True)
    dag_run_id: Mapped[int] = mapped_column(ID, ForeignKey("dag_run.id", ondelete="CASCADE"))
    dag_id: Mapped[str] = mapped_column(String(250))
    run_id: Mapped[str] = mapped_column(String(250))
    task_id: Mapped[str] = mapped_column(String(250))
    state: Mapped[TaskInstanceState] = mapped_column(String(20), default=TaskInstanceState.NONE)
    try_number: Mapped[int] = mapped_column(Integer, default=0)
    max_tries: Mapped[int] = mapped_column(Integer, default=1)
    attempt_id: Mapped[str | None] = mapped_column(String(36))
    queue: Mapped[str] = mapped_column(String(250), default="default")
    pool: Mapped[str] = mapped_column(String(250), default=DEFAULT_POOL)
    pool_slots: Mapped[int] = mapped_column(Integer, default=1)
    priority_weight: Mapped[int] = mapped_column(Integer, default=1)
    hostname: Mapped[str | None] = mapped_column(String(250))
    pid: Mapped[int | None] = mapped_column(Integer)
    scheduled_at: Mapped[dt.datetime | None]
    queued_at: Mapped[dt.datetime | None]
    published_at: Mapped[dt.datetime | None]
    """When the queued sweep last published this try's message again (NULL: never, or a
    previous try's: only a time after `queued_at` counts)."""
    start_date: Mapped[dt.datetime | None]
    end_date: Mapped[dt.datetime | None]
    next_retry_at: Mapped[dt.datetime | None]
    last_heartbeat_at: Mapped[dt.datetime | None]
    queued_by_job_id: Mapped[int | None] = mapped_column(ID)
    context_carrier: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    span_status: Mapped[SpanStatus] = mapped_column(String(20), default=SpanStatus.NOT_STARTED)
    result: Mapped[str | None] = mapped_column(Text)
    error: Mapped[str | None] = mapped_column(Text)
    external_id: Mapped[str | None] = mapped_column(String(250))
    """The Celery task id a CeleryTask try waits on (`tasks.celery_task.external_id_for`)."""
    waiting: Mapped[dict[str, Any] | None] = mapped_column(JSON, deferred=True)
    """What a reschedule-mode sensor's next poke needs (`tasks.sensor.Waiting`: its try,
    its first poke, its pokes); NULL for any other TI. Read only by the sensor's worker."""
    callback_mask: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    """Which of the TI's state moves have a task callback (`core.callback_kinds.BITS`)."""
    map_index: Mapped[int] = mapped_column(Integer, default=-1, server_default="-1")
    """Which index of a mapped task this TI is; -1 for a task that is not mapped."""
    concurrency: Mapped[str | None] = mapped_column(String(250))
    """The name of its task's `Concurrency` limit; NULL for a task without one."""
    concurrency_limit: Mapped[int | None] = mapped_column(Integer)
    """How many TIs of one (concurrency, key) may be queued or running at once."""
    concurrency_key: Mapped[str | None] = mapped_column(String(250))
    """Its key, once a worker computed it (`broker.worker.concurrency_slots`): from then on
    the TI holds a slot of (concurrency, key) whenever it is queued or running."""
    rate_limit: Mapped[str | None] = mapped_column(String(250))
    """The name of its task's `RateLimit` bucket (a `rate_limit` row); NULL for none."""

    __table_args__ = (
        UniqueConstraint(
            "dag_run_id",
            "task_id",
            "map_index",
            name="uq_task_instance_run_task_map",
            postgresql_include=["state", "try_number"],  # the grid's index-only reads
        ),
        Index("ix_task_instance_state_pool", "state", "pool"),
        Index("ix_task_instance_dag_state", "dag_id", "state"),
        Index("ix_task_instance_run_state", "dag_run_id", "state"),
        Index(
            "ix_task_instance_waiting",  # a pool's first waiting TI: the order of the fills
            "pool",
            text("priority_weight DESC"),
            "scheduled_at",
            "id",
            postgresql_where=text("state = 'scheduled'"),
            sqlite_where=text("state = 'scheduled'"),
        ),
        Index(
            "ix_task_instance_limited",  # the TIs waiting for a limit, in queueing order
            text("priority_weight DESC"),
            "scheduled_at",
            "id",
            postgresql_where=text(_WAITS_FOR_A_LIMIT),
            sqlite_where=text(_WAITS_FOR_A_LIMIT),
        ),
        Index(
            "ix_task_instance_concurrency",  # a key's holders: its slots in use
            "concurrency",
            "concurrency_key",
            "state",
            postgresql_where=text("concurrency_key IS NOT NULL"),
            sqlite_where=text("concurrency_key IS NOT NULL"),
        ),
    )


class Job(Base):
    __tablename__ = "job"

    id: Mapped[int] = mapped_column(ID, primary_key=True, autoincrement=True)
    job_type: Mapped[str] = mapped_column(String(20))
    hostname: Mapped[str] = mapped_column(String(250))
    pid: Mapped[int] = mapped_column(Integer)
    state: Mapped[JobState] = mapped_column(String(20), default=JobState.RUNNING)
    start_date: Mapped[dt.datetime]
    end_date: Mapped[dt.datetime | None]
    latest_heartbeat: Mapped[dt.datetime]
    error: Mapped[str | None] = mapped_column(Text)
    """Why a `failed` job stopped (the exception that ended its loop); None otherwise."""
    capacity: Mapped[int | None] = mapped_column(Integer)
    """A triggerer's: the triggers it runs at once (`--capacity`); NULL for others."""

    __table_args__ = (Index("ix_job_state_heartbeat", "state", "latest_heartbeat"),)


class AuditEvent(Base):
    """One operation a user did on a run or a task instance (cancel, mark, note): who, what
    and when. Written in the operation's own transaction; `task_id` is None for a run's."""

    __tablename__ = "audit_log"

    id: Mapped[int] = mapped_column(ID, primary_key=True, autoincrement=True)
    at: Mapped[dt.datetime]
    who: Mapped[str] = mapped_column(String(250))
    action: Mapped[str] = mapped_column(String(50))
    dag_id: Mapped[str] = mapped_column(String(250))
    run_id: Mapped[str] = mapped_column(String(250))
    task_id: Mapped[str | None] = mapped_column(String(250))
    detail: Mapped[str | None] = mapped_column(String(1000))

    __table_args__ = (Index("ix_audit_log_dag_run", "dag_id", "run_id"),)


class DueCallback(Base):
    """One callback due for one state move (a TI's try, a run's end, a missed deadline).

    Inserted in the statement that writes the state (database triggers, migration 0009)
    or, for a deadline, in the scheduler's transaction; `dedup_key` is unique per TI, try
    and kind (per run, kind and queueing for a run), so it exists once whatever writes
    the state. Its delivery (`status`) moves by compare-and-set on `token`
    (`core.queries.callbacks`); while it runs, its worker beats `last_heartbeat_at`.
    """

    __tablename__ = "callback"

    id: Mapped[int] = mapped_column(ID, primary_key=True, autoincrement=True)
    dedup_key: Mapped[str] = mapped_column(String(300), unique=True)
    kind: Mapped[str] = mapped_column(String(30))
    dag_id: Mapped[str] = mapped_column(String(250))
    run_id: Mapped[str] = mapped_column(String(250))
    task_id: Mapped[str | None] = mapped_column(String(250))
    dag_run_id: Mapped[int | None] = mapped_column(ID)
    ti_id: Mapped[int | None] = mapped_column(ID)
    try_number: Mapped[int] = mapped_column(Integer, default=0)
    state: Mapped[str] = mapped_column(String(20))
    status: Mapped[str] = mapped_column(String(20), default="pending")
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    token: Mapped[str | None] = mapped_column(String(36))
    created_at: Mapped[dt.datetime | None]
    next_attempt_at: Mapped[dt.datetime | None]
    published_at: Mapped[dt.datetime | None]
    started_at: Mapped[dt.datetime | None]
    finished_at: Mapped[dt.datetime | None]
    error: Mapped[str | None] = mapped_column(Text)
    last_heartbeat_at: Mapped[dt.datetime | None]
    """The last beat of the worker running it (`running` only; migration 0016)."""

    __table_args__ = (Index("ix_callback_status_next", "status", "next_attempt_at"),)


class Deployment(Base):
    """The database's own id (one row, made by its migration): every message carries it,
    so a worker of another deployment on the same broker and namespace refuses it."""

    __tablename__ = "deployment"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)


class Pool(Base):
    __tablename__ = "pool"

    name: Mapped[str] = mapped_column(String(250), primary_key=True)
    slots: Mapped[int] = mapped_column(Integer)
    description: Mapped[str | None] = mapped_column(Text)


class RateLimit(Base):
    """A token bucket shared by every task naming it (`sluice.RateLimit`): `amount`
    tokens at most, refilled at `amount` per `per_seconds`. `tokens` is what it held at
    `refilled_at`; a queueing transaction refills and takes under the row's lock."""

    __tablename__ = "rate_limit"

    name: Mapped[str] = mapped_column(String(250), primary_key=True)
    amount: Mapped[int] = mapped_column(Integer)
    per_seconds: Mapped[float] = mapped_column(Float)
    tokens: Mapped[float] = mapped_column(Float)
    refilled_at: Mapped[dt.datetime]


class StoredConnection(Base):
    """A connection (`sluice connections add`): `value` is the Fernet token of its JSON
    (`tasks.secrets.Connection.as_dict`, `core.fernet`); no column holds it in plain text."""

    __tablename__ = "connection"

    name: Mapped[str] = mapped_column(String(250), primary_key=True)
    value: Mapped[str] = mapped_column(Text)
    created_at: Mapped[dt.datetime]
    updated_at: Mapped[dt.datetime]


class StoredVariable(Base):
    """A variable (`sluice variables set`): `value` is the Fernet token of its text;
    `is_secret` (`--secret`): tasks that read it have it masked in their logs, and lists
    show `***`."""

    __tablename__ = "variable"

    key: Mapped[str] = mapped_column(String(250), primary_key=True)
    value: Mapped[str] = mapped_column(Text)
    is_secret: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[dt.datetime]
    updated_at: Mapped[dt.datetime]


class User(Base):
    """A person who uses the API and the UI (`sluice users create`): `role` is viewer,
    operator or admin (`core.roles`); `password_hash` (scrypt, `core.passwords`) is set
    by `sluice users set-password`, else NULL (tokens only)."""

    __tablename__ = "sluice_user"

    name: Mapped[str] = mapped_column(String(250), primary_key=True)
    role: Mapped[str] = mapped_column(String(20))
    password_hash: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[dt.datetime]


class ApiToken(Base):
    """A user's bearer token, kept as the SHA-256 of the token (printed once, at its
    creation): a token is valid while not revoked and not past `expires_at`."""

    __tablename__ = "api_token"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    user_name: Mapped[str] = mapped_column(
        String(250), ForeignKey("sluice_user.name", ondelete="CASCADE")
    )
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[dt.datetime]
    expires_at: Mapped[dt.datetime | None]
    last_used_at: Mapped[dt.datetime | None]
    revoked_at: Mapped[dt.datetime | None]


class UiSession(Base):
    """A web UI login (`POST /api/v1/session`): the cookie holds a random id, this row its
    SHA-256; `csrf_token` must come back in `X-CSRF-Token` on every write the cookie makes.
    Ended by logout, by `expires_at`, or with its user."""

    __tablename__ = "ui_session"

    id_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_name: Mapped[str] = mapped_column(
        String(250), ForeignKey("sluice_user.name", ondelete="CASCADE"), index=True
    )
    csrf_token: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[dt.datetime]
    expires_at: Mapped[dt.datetime]


class TaskLog(Base):
    """What one try of a TaskInstance printed and logged, as the worker captured it.

    One row per (`ti_id`, `try_number`). `content` holds the try's last lines, at most
    the writer's byte cap; older lines were dropped first and are counted in
    `dropped_lines`. The worker rewrites the row while the try runs and once more,
    with `finished_at`, before it writes the try's result.
    """

    __tablename__ = "task_log"

    ti_id: Mapped[int] = mapped_column(
        ID, ForeignKey("task_instance.id", ondelete="CASCADE"), primary_key=True
    )
    try_number: Mapped[int] = mapped_column(Integer, primary_key=True)
    attempt_id: Mapped[str | None] = mapped_column(String(36))
    hostname: Mapped[str | None] = mapped_column(String(250))
    content: Mapped[str] = mapped_column(Text, default="")
    dropped_lines: Mapped[int] = mapped_column(Integer, default=0)
    started_at: Mapped[dt.datetime]
    updated_at: Mapped[dt.datetime]
    finished_at: Mapped[dt.datetime | None]


class TaskTry(Base):
    """An earlier try of a TaskInstance, as its row held it when the TI was reopened for
    another try (a retry scheduled, a clear): its outcome, host and times.

    Written only by the database: the trigger `tr_task_instance_try` (migration 0011)
    copies the old row when its state goes from a try's own (running, or how the try
    ended) back to none, scheduled or queued, in the transaction that reopens it; the
    hot paths (queueing, claiming, results) never reopen a TI, so they write nothing
    here. The current try stays on the TI row. One row per (`ti_id`, `try_number`).
    """

    __tablename__ = "task_try"

    ti_id: Mapped[int] = mapped_column(
        ID, ForeignKey("task_instance.id", ondelete="CASCADE"), primary_key=True
    )
    try_number: Mapped[int] = mapped_column(Integer, primary_key=True)
    state: Mapped[TaskInstanceState] = mapped_column(String(20))
    hostname: Mapped[str | None] = mapped_column(String(250))
    queued_at: Mapped[dt.datetime | None]
    start_date: Mapped[dt.datetime | None]
    end_date: Mapped[dt.datetime | None]


class MaskedResult(Base):
    """A try's return value as the UI and API show it, when it held a secret the try read
    (a connection's password, a secret variable, a secret conf value, the deployment's
    own): the JSON text with each secret `***`. Written by the worker before the result,
    only when masking changed it; the stored `task_instance.result` stays whole for the
    tasks downstream. One row per (`ti_id`, `try_number`)."""

    __tablename__ = "masked_result"

    ti_id: Mapped[int] = mapped_column(
        ID, ForeignKey("task_instance.id", ondelete="CASCADE"), primary_key=True
    )
    try_number: Mapped[int] = mapped_column(Integer, primary_key=True)
    display: Mapped[str] = mapped_column(Text)
