"""The JSON shapes of `/api/v1`: request bodies (strict, no extra fields) and responses.

Times are ISO 8601 in UTC. States are the enums of `scheduler.core.states`. Request
strings are checked to be storable (no NUL, valid UTF-8, at most 250 chars for
ids) so that no input reaches the database it would refuse; the checks are
`scheduler.control.inputs`', which the CLI makes too (a conf is checked by the route,
against the deployment's SLUICE_MAX_CONF_BYTES and SLUICE_MAX_CONF_DEPTH).
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictBool

from sluice.scheduler.control.inputs import (
    ID_MAX,
    MAX_MAP_INDEX,
    check_event_key,
    check_id_text,
    storable,
)
from sluice.scheduler.core.states import DagRunState, RunType, TaskInstanceState
from sluice.scheduler.scheduling.dagrun import check_run_id

__all__ = ["ID_MAX", "storable"]


def _run_id(value: str) -> str:
    return storable(check_run_id(check_id_text(value)))


RunIdIn = Annotated[str, Field(min_length=1, max_length=ID_MAX), AfterValidator(_run_id)]

VERSION_MAX = 200
"""The longest revision a run may be asked at (`core.bundle_specs.REF`'s bound)."""


def _version(value: str) -> str:
    return storable(check_id_text(value))


VersionIn = Annotated[str, Field(min_length=1, max_length=VERSION_MAX), AfterValidator(_version)]

SHA_PATTERN = "^[0-9a-f]{4,40}$"
"""A commit named in a URL: its full sha, or at least 4 of its first characters."""


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# -- requests ------------------------------------------------------------------------------


class DagPatch(Strict):
    is_paused: StrictBool = Field(description="pause (true) or unpause (false) the schedule")


class RunCreate(Strict):
    run_id: RunIdIn | None = Field(
        default=None, description="defaults to manual__<logical date>", examples=["nightly-fix-1"]
    )
    logical_date: Annotated[str, AfterValidator(storable)] | None = Field(
        default=None,
        description="ISO 8601; a date without a zone is UTC; defaults to now",
        examples=["2026-01-31T00:00:00Z"],
    )
    conf: dict[str, Any] | None = Field(
        default=None,
        description=(
            "a JSON object handed to the tasks as context['conf']; at most "
            "SLUICE_MAX_CONF_BYTES (64 KiB) and SLUICE_MAX_CONF_DEPTH (32) levels deep"
        ),
    )
    version: VersionIn | None = Field(
        default=None,
        description=(
            "a git bundle's DAG only: the commit (a full or short sha), tag or branch whose "
            "version of the DAG the run takes, as `sluice dags trigger --version`; "
            "default: the DAG's latest version"
        ),
        examples=["release-1"],
    )


class NoteIn(Strict):
    note: str = Field(max_length=2000, description="one line, at most 500 characters once stripped")


class ClearRequest(Strict):
    downstream: StrictBool = Field(default=False, description="also clear its downstream tasks")
    map_index: int | None = Field(
        default=None,
        ge=0,
        le=MAX_MAP_INDEX,
        description="clear only this index of a mapped task (with downstream: only what "
        "depends on it); default: every index",
    )


class TaskMarkIn(Strict):
    state: Literal["success", "failed", "skipped"]
    downstream: StrictBool = Field(default=False, description="also mark its downstream tasks")
    upstream: StrictBool = Field(default=False, description="also mark its upstream tasks")


class RunMarkIn(Strict):
    state: Literal["success", "failed"]


EventKeyIn = Annotated[str, Field(min_length=1, max_length=ID_MAX), AfterValidator(check_event_key)]


class EventIn(Strict):
    key: EventKeyIn = Field(
        description="the key of the Event(key) triggers to fire", examples=["approve-load"]
    )
    payload: dict[str, Any] | None = Field(
        default=None,
        description=(
            "a JSON object, the resumed tasks' context['trigger_event'] (null: {}); at most "
            "SLUICE_MAX_CONF_BYTES (64 KiB) and SLUICE_MAX_CONF_DEPTH (32) levels deep"
        ),
        examples=[{"approved": True}],
    )


class AssetEventIn(Strict):
    uri: str = Field(
        min_length=1,
        max_length=1000,
        description="the asset's URI, as in sluice.Asset(uri)",
        examples=["s3://bucket/raw/"],
    )
    extra: dict[str, Any] | None = Field(
        default=None,
        description=(
            "a JSON object, the event's extra (null: {}); at most SLUICE_MAX_CONF_BYTES "
            "(and 64 KiB) and SLUICE_MAX_CONF_DEPTH levels deep"
        ),
        examples=[{"rows": 42}],
    )


# -- responses -----------------------------------------------------------------------------


class AssetEventOut(BaseModel):
    id: int
    uri: str


class AssetOut(BaseModel):
    uri: str
    name: str | None
    producers: list[str] = Field(description="`dag_id.task_id` of each task producing it")
    consumers: list[str] = Field(description="the DAGs scheduled on it")
    events: int = Field(description="how many events it has")
    last_event: dict[str, Any] | None = Field(
        description="its last event: uri, extra, source_dag_id, source_run_id, "
        "source_task_id, timestamp"
    )


class AssetList(BaseModel):
    assets: list[AssetOut]


class RunBrief(BaseModel):
    run_id: str
    state: DagRunState
    logical_date: dt.datetime


class DagSummary(BaseModel):
    dag_id: str
    fileloc: str
    schedule: str | None
    is_paused: bool
    next_dagrun: dt.datetime | None = Field(
        description="the logical date of the next scheduled run (the start of its interval)"
    )
    next_dagrun_create_after: dt.datetime | None = Field(
        description="when the next scheduled run will be created (the end of its interval)"
    )
    task_count: int
    import_error: str | None = Field(description="the last parse of its file failed with this")
    watch_error: str | None = Field(
        default=None,
        description="a watched DAG's last evaluation failed with this (sluice.Watch)",
    )
    recent_runs: list[RunBrief] = Field(description="the newest runs first")


class ImportErrorOut(BaseModel):
    fileloc: str
    error: str


class DagList(BaseModel):
    dags: list[DagSummary]
    import_errors: list[ImportErrorOut] = Field(description="DAG files that failed to import")


class TaskSpecOut(BaseModel):
    task_id: str
    kind: str | None
    upstream: list[str]
    downstream: list[str]
    trigger_rule: str | None
    retries: int
    queue: str


_PARAMS = (
    "its params (`sluice.Param`), one JSON Schema object: `properties` has each param's "
    "keywords (`type`, `minimum`, `enum`, `format`, ...) with its `default` and "
    "`description` when set, `required` the params without default, which a trigger's "
    "conf must give; a trigger's conf is checked against it (422 naming the param and "
    "the rule). A DAG without params has no properties."
)


class TaskGroupOut(BaseModel):
    group_id: str
    parent: str | None = Field(description="the group it is nested in (null at the top)")
    mapped: bool = Field(description="a mapped task group (`.expand`)")
    tasks: list[str] = Field(description="its task ids, its nested groups' included")


class DagDetail(DagSummary):
    consumes: list[str] = Field(description="the URIs of the assets its schedule names")
    produces: list[str] = Field(description="the URIs of the assets its tasks' outlets name")
    params: dict[str, Any] = Field(description=_PARAMS)
    groups: list[TaskGroupOut] = Field(description="its task groups, in definition order")
    tasks: list[TaskSpecOut] = Field(description="in topological order")


class VersionRefOut(BaseModel):
    """The DAG version a run follows (of a git bundle's DAG): its commit and subject."""

    sha: str = Field(description="the commit the version was recorded at (full sha)")
    short: str = Field(description="its first 12 characters")
    subject: str = Field(description="the first line of the commit's message")


_BUNDLE_VERSION = (
    "the commit (full sha) of a git bundle whose code the run runs; null for a run of a "
    "folder's DAG (not versioned)"
)
_VERSION = (
    "the DAG version the run follows (its tasks, its file): recorded at `bundle_version` "
    "or, when that commit changed neither the DAG nor its file, at the commit before that "
    "did; null for a folder's DAG"
)


class RunSummary(BaseModel):
    dag_id: str
    run_id: str
    logical_date: dt.datetime
    run_type: RunType
    state: DagRunState
    queued_at: dt.datetime | None
    start_date: dt.datetime | None
    end_date: dt.datetime | None
    trace_id: str | None
    trace_url: str | None = Field(description="a link to its trace when SLUICE_TRACE_URL is set")
    bundle_version: str | None = Field(default=None, description=_BUNDLE_VERSION)
    version: VersionRefOut | None = Field(default=None, description=_VERSION)


class NoteOut(BaseModel):
    note: str
    who: str
    at: dt.datetime


class RunOut(RunSummary):
    conf: dict[str, Any]
    note: NoteOut | None = Field(default=None, description="the run's note, if it has one")


class RunList(BaseModel):
    runs: list[RunSummary] = Field(
        description="the newest logical dates first; a run's conf is in GET …/runs/{run_id}"
    )
    total: int
    limit: int
    offset: int


RESULT_SHOWN_CHARS = 10_000
"""The most characters of a task's result a task instance's detail shows."""


class TaskInstanceOut(BaseModel):
    task_id: str
    map_index: int | None = Field(description="the index of a mapped task; null if not mapped")
    state: TaskInstanceState
    try_number: int
    max_tries: int
    queue: str
    pool: str
    hostname: str | None
    attempt_id: str | None
    scheduled_at: dt.datetime | None
    queued_at: dt.datetime | None
    start_date: dt.datetime | None
    end_date: dt.datetime | None
    next_retry_at: dt.datetime | None = Field(
        description="when its retry is due (up_for_retry), or a sensor's next poke "
        "(up_for_reschedule)"
    )
    error: str | None


class TriggerOut(BaseModel):
    """What a deferred task instance waits on."""

    classpath: str = Field(description="the trigger's class, `module.Class`")
    kwargs: dict[str, Any] = Field(description="its arguments (`serialize()`)")
    since: dt.datetime | None = Field(description="when the task deferred")
    until: dt.datetime | None = Field(description="its timeout: then the task fails; null: none")
    event_key: str | None = Field(
        description="of an Event trigger: the key whose event resumes it (POST /api/v1/events)"
    )


class EventOut(BaseModel):
    resumed: int = Field(description="the task instances the event resumed")


class TaskInstanceList(BaseModel):
    task_instances: list[TaskInstanceOut] = Field(
        description="in the DAG's topological order, a mapped task's by map index"
    )
    total: int = Field(description="the task instances that match, over every page")
    limit: int
    offset: int


class TryOut(BaseModel):
    try_number: int
    attempt_id: str | None
    hostname: str | None
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    state: TaskInstanceState | None = Field(description="only known for the current try")
    has_log: bool


class TaskInstanceDetail(TaskInstanceOut):
    dag_id: str
    run_id: str
    upstream: list[str]
    downstream: list[str]
    tries: list[TryOut] = Field(description="oldest first")
    trace_url: str | None
    why: str | None = Field(
        default=None, description="why it is in its state, in plain words (tasks explain)"
    )
    reasons: list[str] = Field(default_factory=list, description="the details behind `why`")
    note: NoteOut | None = Field(default=None, description="the task instance's note, if any")
    trigger: TriggerOut | None = Field(
        default=None, description="what it waits on, while it is deferred"
    )
    result: str | None = Field(
        default=None,
        description="its return value as JSON text (of a success; null: none), every secret "
        f"the try read shown as ***; at most {RESULT_SHOWN_CHARS} characters",
    )
    result_truncated: bool = Field(
        default=False, description=f"the result is longer than the {RESULT_SHOWN_CHARS} shown"
    )


class TryTimes(BaseModel):
    """One try of a task instance, as the database keeps its times."""

    try_number: int
    state: TaskInstanceState | None = Field(
        description="how the try ended (the current try's: the task instance's state; an "
        "earlier try's as kept when the next was scheduled: up_for_retry for a try that "
        "failed and was retried); null if not kept"
    )
    hostname: str | None
    queued_at: dt.datetime | None = Field(description="when it was queued; null if not kept")
    started_at: dt.datetime | None = Field(description="null: not started, or not kept")
    finished_at: dt.datetime | None = Field(description="null: not finished, or not kept")


class TaskInstanceTries(BaseModel):
    task_id: str
    map_index: int | None = Field(description="the index of a mapped task; null if not mapped")
    state: TaskInstanceState
    try_number: int
    tries: list[TryTimes] = Field(
        description="tries 1 to try_number, oldest first (the newest 100 at most)"
    )


class RunTries(BaseModel):
    """`GET …/runs/{run_id}/tries`: the Gantt chart of a run, a page of its task instances."""

    dag_id: str
    run_id: str
    state: DagRunState
    queued_at: dt.datetime | None
    start_date: dt.datetime | None
    end_date: dt.datetime | None
    total: int = Field(description="the run's task instances (all pages)")
    limit: int
    offset: int
    task_instances: list[TaskInstanceTries] = Field(
        description="in the DAG's topological order, a mapped task's by map index; task ids "
        "of older versions last (sorted)"
    )


class TaskLogOut(BaseModel):
    dag_id: str
    run_id: str
    task_id: str
    try_number: int
    attempt_id: str | None
    hostname: str | None
    started_at: dt.datetime | None
    updated_at: dt.datetime | None
    finished_at: dt.datetime | None
    dropped_lines: int = Field(description="older lines dropped to keep the per-try cap")
    content: str = Field(description="the captured lines, newline-separated")


class ClearOut(BaseModel):
    cleared: int
    run_state: DagRunState


class MarkOut(BaseModel):
    marked: list[str] = Field(description="the task ids of the task instances marked")
    stopped: int = Field(description="queued or running tries stopped")
    run_state: DagRunState


class GridCell(BaseModel):
    state: TaskInstanceState = Field(
        description="the TI's state; for a mapped task the first of its indexes' states "
        "in the order of the compact grid's `legend` (what is still moving, then what "
        "failed, then how it ended)"
    )
    try_number: int
    mapped: int | None = Field(default=None, description="a mapped task's number of indexes")
    states: dict[str, int] | None = Field(
        default=None, description="a mapped task's indexes counted by state"
    )


class GridRunHeader(BaseModel):
    """A grid column's run: what both formats show of it."""

    run_id: str
    state: DagRunState
    run_type: RunType
    logical_date: dt.datetime
    start_date: dt.datetime | None
    end_date: dt.datetime | None
    bundle_version: str | None = Field(default=None, description=_BUNDLE_VERSION)
    version: VersionRefOut | None = Field(default=None, description=_VERSION)


class GridRun(GridRunHeader):
    cells: dict[str, GridCell] = Field(description="by task id")


class Grid(BaseModel):
    """`GET …/grid` (`format=cells`, the default): each run's cells by task id."""

    dag_id: str
    task_ids: list[str] = Field(
        description="the rows: the DAG's tasks in topological order, then the task ids of "
        "older versions its runs have TIs of (sorted)"
    )
    runs: list[GridRun] = Field(description="the columns, oldest first")
    active: bool = Field(description="some run is queued or running")


class GridMapped(BaseModel):
    count: int = Field(description="the mapped task's number of indexes (its TIs)")
    states: dict[str, int] = Field(description="its indexes counted by state")


class CompactGridRun(GridRunHeader):
    states: str = Field(
        description="one character per row of `task_ids`: the state's index in `legend` "
        "in base 36 ('0'-'9', then 'a'-'z'), or '-' where the run has no TI of that task; "
        "a mapped task's character is the first of its indexes' states in `legend`",
        examples=["888-50"],
    )
    tries: dict[int, int] = Field(
        description="the try number by row (its index in `task_ids`) where it is not the "
        "usual one; a row not listed has try 1 if its state is in the grid's `tried`, "
        "else 0 (a mapped task's: its indexes' highest)",
        examples=[{"3": 2}],
    )
    mapped: dict[int, GridMapped] = Field(
        description="the rows of mapped tasks: their indexes' count and states",
        examples=[{"5": {"count": 3, "states": {"success": 2, "running": 1}}}],
    )


class CompactGrid(BaseModel):
    """`GET …/grid?format=compact`: the cells of `Grid`, one string per run."""

    dag_id: str
    legend: list[TaskInstanceState] = Field(
        description="the states the characters of a run's `states` stand for, by index; "
        "in the order a mapped task's cell picks its state by (running first)"
    )
    tried: list[TaskInstanceState] = Field(
        description="the states whose usual try number is 1 (a TI reaches them with a "
        "try), in `legend`'s order: a row that `tries` does not list has try 1 in one of "
        "them, else 0"
    )
    task_ids: list[str] = Field(
        description="the rows: the DAG's tasks in topological order, then the task ids of "
        "older versions its runs have TIs of (sorted); with `rows`, the first `rows` of them"
    )
    rows_total: int = Field(
        description="the rows of the whole grid: the DAG's tasks, and the task ids of older "
        "versions when `task_ids` reaches past the DAG's tasks"
    )
    runs: list[CompactGridRun] = Field(description="the columns, oldest first")
    active: bool = Field(description="some run is queued or running")


class VersionOut(BaseModel):
    """One version of a git bundle's DAG."""

    sha: str = Field(description="the commit it was recorded at (full sha)")
    short: str = Field(description="its first 12 characters")
    bundle: str
    fileloc: str = Field(description="bundle://<bundle>/<the DAG file's path in the repository>")
    committed_at: dt.datetime = Field(description="the commit's author date")
    author: str
    subject: str = Field(description="the first line of the commit's message")
    runs: int = Field(description="the runs created with this version")
    tasks: list[str] = Field(description="its task ids")


class VersionList(BaseModel):
    dag_id: str
    versioned: bool = Field(
        description="the DAG comes from a git bundle; false: from a folder, which keeps no "
        "versions (`versions` lists none, or those of when it came from a git bundle)"
    )
    versions: list[VersionOut] = Field(description="the newest commit first")


class VersionCode(BaseModel):
    """The DAG's file as it was at one of its versions."""

    dag_id: str
    sha: str
    short: str
    subject: str
    author: str
    committed_at: dt.datetime
    fileloc: str
    path: str = Field(description="the DAG file's path in the repository")
    content: str = Field(description="the file's text (bytes that are not UTF-8 replaced)")
    truncated: bool = Field(description="the file is longer than the 1 MiB shown")


class VersionChanges(BaseModel):
    """The tasks one version of a DAG adds and removes, against another."""

    dag_id: str
    sha: str
    since: str | None = Field(
        description="the version compared with (full sha): `since` if given, else the one "
        "before `sha`; null when `sha` is the DAG's first (every task is added)"
    )
    added: list[str] = Field(description="task ids `sha` has and `since` has not, sorted")
    removed: list[str] = Field(description="task ids `since` has and `sha` has not, sorted")


class DatabaseHealth(BaseModel):
    ok: bool
    detail: str


class SchedulerHealth(BaseModel):
    job_id: int
    hostname: str
    pid: int
    latest_heartbeat: dt.datetime
    alive: bool


class WorkerHealth(BaseModel):
    name: str
    queues: list[str]


class WorkersHealth(BaseModel):
    ok: bool | None = Field(description="null: the broker could not be asked")
    seen: list[WorkerHealth]
    detail: str


class Health(BaseModel):
    status: Literal["ok", "degraded", "unavailable"]
    database: DatabaseHealth
    schedulers: list[SchedulerHealth]
    schedulers_alive: int
    workers: WorkersHealth


class ErrorOut(BaseModel):
    detail: str
