"""Deferral: a task that waits without a worker (`sluice.defer`), and the triggers that
say when it may go on (`sluice.Trigger`, the built-ins `sluice.triggers.*`:
`Sleep`, `Until`, `FileExists`, `Event`, which waits for an event sent by a person or
a system, an approval, `RunFinished`, which waits for another run's end, and `CreateRun`,
which has the triggerers create a run of another DAG: `TriggerDagRun`'s).

Inside a `@task` function, `defer(trigger, timeout=None)` ends the try without finishing
the task: the worker records its TI `deferred` (no worker, no pool slot) with the trigger,
stored as its class path and `serialize()`'s keyword arguments (JSON, at most
`MAX_TRIGGER_BYTES`). A triggerer (`sluice triggerer`) rebuilds the trigger, runs its
`run()` on an asyncio loop, and at its first event queues the TI again: the function runs
again, its `context["trigger_event"]` the event's payload (None on a task's first run).
Neither a deferral nor a resume grows `try_number`; past `timeout` the TI fails (retries
apply).

A trigger's module must be importable where the triggerers run (the DAGs folder is on
their path). Its code runs in the triggerer's process, never in a scheduler's.
"""

from __future__ import annotations

import datetime as dt
import importlib
import json
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sluice.tasks.control_chars import first_control_char
from sluice.tasks.dag_context import DAG_ID_RE
from sluice.tasks.run_ids import run_id_problem

MAX_TRIGGER_BYTES = 64 * 1024
"""Largest `serialize()` of a trigger, in bytes of compact JSON."""


@dataclass(frozen=True)
class TriggerEvent:
    """What a trigger yields when its TI may go on: `payload` (JSON) becomes the TI's
    `context["trigger_event"]`."""

    payload: Any = None


class Trigger:
    """Base of every trigger: `serialize()` returns the `__init__` keyword arguments
    (JSON); `run()` is an async generator that yields a `TriggerEvent` when its TI may go
    on. It must not block its loop (no `time.sleep`: `await asyncio.sleep`)."""

    def serialize(self) -> dict[str, Any]:
        raise NotImplementedError

    def run(self) -> AsyncIterator[TriggerEvent]:
        raise NotImplementedError

    def classpath(self) -> str:
        """`module.Class`; for a class defined in a DAG file (imported under a name of
        the loader's, `loader.module_name_for`), `/path/of/the/file.py:Class`."""
        from sluice.tasks.loader import DAG_MODULE_PREFIX

        kind = type(self)
        module = sys.modules.get(kind.__module__)
        where = getattr(module, "__file__", None)
        if kind.__module__.startswith(DAG_MODULE_PREFIX) and where:
            return f"{where}:{kind.__qualname__}"
        return f"{kind.__module__}.{kind.__qualname__}"


class TaskDeferred(BaseException):  # noqa: N818 - as Airflow's, what the task asked for
    """Raised by `defer`: the try ends, its TI waits on `trigger`. A BaseException, so a
    task's `except Exception` does not swallow it."""

    def __init__(self, classpath: str, kwargs: dict[str, Any], timeout: float | None) -> None:
        super().__init__(f"deferred on {classpath}")
        self.classpath = classpath
        self.kwargs = kwargs
        self.timeout = timeout


def defer(trigger: Trigger, timeout: dt.timedelta | float | None = None) -> None:
    """End this try without finishing the task; run it again when `trigger` fires (its
    `context["trigger_event"]` then the event's payload). Past `timeout` the TI fails."""
    if not isinstance(trigger, Trigger):
        raise TypeError(f"defer() takes a sluice.Trigger, got {type(trigger).__name__}")
    kwargs = trigger.serialize()
    text = json.dumps(kwargs, separators=(",", ":"), allow_nan=False)
    if len(text.encode("utf-8")) > MAX_TRIGGER_BYTES:
        raise ValueError(f"a trigger's serialize() is over {MAX_TRIGGER_BYTES} bytes of JSON")
    seconds = timeout.total_seconds() if isinstance(timeout, dt.timedelta) else timeout
    if seconds is not None and (isinstance(seconds, bool) or seconds <= 0):
        raise ValueError("defer()'s timeout must be positive")
    raise TaskDeferred(trigger.classpath(), json.loads(text), seconds)


def rebuild(classpath: str, kwargs: dict[str, Any]) -> Trigger:
    """The trigger stored as `classpath` and `kwargs` (ImportError, TypeError, ... if it
    cannot be: its TI then fails with that error). A DAG file's class is had by importing
    the file as the loader does (once per process)."""
    if ":" in classpath:
        path, _, name = classpath.rpartition(":")
        module = _dag_module(path)
    else:
        module_name, _, name = classpath.rpartition(".")
        module = importlib.import_module(module_name)
    kind = getattr(module, name)
    if not (isinstance(kind, type) and issubclass(kind, Trigger)):
        raise TypeError(f"{classpath} is not a sluice.Trigger")
    return kind(**kwargs)


def _dag_module(path: str) -> Any:
    from sluice.tasks.loader import load_file, module_name_for

    name = module_name_for(path)
    if name not in sys.modules:
        load_file(path)
    return sys.modules[name]


def _due(at: dt.datetime) -> TriggerEvent:
    return TriggerEvent({"due": at.isoformat()})


class Sleep(Trigger):
    """Fires `{"due": ISO}` once `delta` has passed since the deferral."""

    def __init__(self, delta: dt.timedelta | float, due: str | None = None) -> None:
        seconds = delta.total_seconds() if isinstance(delta, dt.timedelta) else float(delta)
        self.seconds = seconds
        self.due = (
            dt.datetime.fromisoformat(due)
            if due is not None
            else dt.datetime.now(dt.UTC) + dt.timedelta(seconds=seconds)
        )

    def serialize(self) -> dict[str, Any]:
        return {"delta": self.seconds, "due": self.due.isoformat()}

    async def run(self) -> AsyncIterator[TriggerEvent]:
        await _sleep_until(self.due)
        yield _due(self.due)


class Until(Trigger):
    """Fires `{"due": ISO}` at `moment` (a timezone-aware datetime or its ISO text)."""

    def __init__(self, moment: dt.datetime | str) -> None:
        at = dt.datetime.fromisoformat(moment) if isinstance(moment, str) else moment
        if at.tzinfo is None:
            raise ValueError("Until needs a timezone-aware datetime")
        self.moment = at

    def serialize(self) -> dict[str, Any]:
        return {"moment": self.moment.isoformat()}

    async def run(self) -> AsyncIterator[TriggerEvent]:
        await _sleep_until(self.moment)
        yield _due(self.moment)


class FileExists(Trigger):
    """Fires `{"path": path}` once `path` exists, looked at every `poke_interval` s."""

    def __init__(self, path: str, poke_interval: float = 5.0) -> None:
        self.path = str(path)
        self.poke_interval = float(poke_interval)

    def serialize(self) -> dict[str, Any]:
        return {"path": self.path, "poke_interval": self.poke_interval}

    async def run(self) -> AsyncIterator[TriggerEvent]:
        import asyncio  # in the triggerer's loop; a DAG file's parse never needs it

        while not await asyncio.to_thread(Path(self.path).exists):
            await asyncio.sleep(self.poke_interval)
        yield TriggerEvent({"path": self.path})


EVENT_KEY_MAX = 250
"""Longest key of an `Event` (the `event` table's column)."""


def check_event_key(key: object) -> str:
    """`key` if it may name an event: text of 1 to EVENT_KEY_MAX characters, no C0
    control character nor DEL; ValueError otherwise (one line)."""
    if not isinstance(key, str):
        raise ValueError(f"an event key must be text, got {type(key).__name__}")
    if not 1 <= len(key) <= EVENT_KEY_MAX:
        raise ValueError(f"an event key must be 1 to {EVENT_KEY_MAX} characters, got {len(key)}")
    bad = first_control_char(key)
    if bad is not None:
        raise ValueError(
            f"an event key must not contain control characters (found U+{ord(bad):04X})"
        )
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("an event key must be valid UTF-8 text") from None
    return key


class Event(Trigger):
    """Fires with the payload of an event sent on `key` (`sluice events send KEY
    [--payload JSON]`, `POST /api/v1/events`, the UI's Approve and Reject buttons): the
    oldest such event sent after the TI's run was queued, so an event sent before the TI
    deferred is not missed. Its `run()` is never used: the triggerers and the senders find
    the events in the database (`scheduler.core.queries.events`)."""

    def __init__(self, key: str) -> None:
        self.key = check_event_key(key)

    def serialize(self) -> dict[str, Any]:
        return {"key": self.key}

    async def run(self) -> AsyncIterator[TriggerEvent]:
        raise RuntimeError("an Event trigger is resolved from the database, never run")
        yield  # an async generator


EVENT_CLASSPATH = f"{Event.__module__}.{Event.__qualname__}"
"""The class path an `Event` trigger is stored under (`trigger.classpath`)."""


RUN_END_STATES = ("success", "failed")


class RunFinished(Trigger):
    """Fires with `{"dag_id", "run_id", "state"}` once that run ends in one of `states`;
    a run that ends in another state fails the waiting task (retries apply). As `Event`,
    its `run()` is never used: the triggerers read the run's state from the database
    (`scheduler.core.queries.run_waits`)."""

    def __init__(self, dag_id: str, run_id: str, states: Any = ("success",)) -> None:
        for name, value in (("dag_id", dag_id), ("run_id", run_id)):
            if not isinstance(value, str) or not 0 < len(value) <= 250:
                raise ValueError(f"RunFinished's {name} must be 1 to 250 characters")
        wanted = (states,) if isinstance(states, str) else tuple(states)
        unknown = sorted(set(wanted) - set(RUN_END_STATES))
        if not wanted or unknown:
            raise ValueError(f"RunFinished's states must be among {', '.join(RUN_END_STATES)}")
        self.dag_id, self.run_id, self.states = dag_id, run_id, wanted

    def serialize(self) -> dict[str, Any]:
        return {"dag_id": self.dag_id, "run_id": self.run_id, "states": list(self.states)}

    async def run(self) -> AsyncIterator[TriggerEvent]:
        raise RuntimeError("RunFinished is resolved by the triggerers, never run")
        yield  # an async generator


RUN_FINISHED_CLASSPATH = f"{RunFinished.__module__}.{RunFinished.__qualname__}"
"""The class path a `RunFinished` trigger is stored under."""


class CreateRun(Trigger):
    """Creates the run `run_id` of DAG `dag_id` (a manual run, with `conf`, at
    `logical_date`: ISO text, or None for the moment it is created) and fires with
    `{"dag_id", "run_id"}` once it exists. A run of that id that exists already counts as
    created: a retry of the task that asked for it creates no second one. A DAG that does
    not exist (or is no longer in its folder), a conf over the deployment's bounds, or
    another run at that logical date fails the waiting task (retries apply). What
    `TriggerDagRun` defers on; as `Event`, its `run()` is never used: the triggerers
    create the run (`scheduler.scheduling.triggered_runs`)."""

    def __init__(
        self,
        dag_id: str,
        run_id: str,
        conf: dict[str, Any] | None = None,
        logical_date: str | None = None,
    ) -> None:
        if not isinstance(dag_id, str) or not DAG_ID_RE.match(dag_id):
            raise ValueError(f"CreateRun's dag_id {dag_id!r} is not a DAG id")
        problem = run_id_problem(run_id)
        if problem is not None:
            raise ValueError(f"CreateRun's run_id {problem}")
        if conf is not None and not isinstance(conf, dict):
            raise ValueError(f"CreateRun's conf must be a dict, got {type(conf).__name__}")
        if logical_date is not None:
            at = dt.datetime.fromisoformat(logical_date)  # ValueError if it is not ISO
            if at.tzinfo is None:
                raise ValueError("CreateRun's logical_date must be timezone-aware")
        self.dag_id, self.run_id = dag_id, run_id
        self.conf = dict(conf or {})
        self.logical_date = logical_date

    def serialize(self) -> dict[str, Any]:
        return {
            "dag_id": self.dag_id,
            "run_id": self.run_id,
            "conf": self.conf,
            "logical_date": self.logical_date,
        }

    async def run(self) -> AsyncIterator[TriggerEvent]:
        raise RuntimeError("CreateRun is resolved by the triggerers, never run")
        yield  # an async generator


CREATE_RUN_CLASSPATH = f"{CreateRun.__module__}.{CreateRun.__qualname__}"
"""The class path a `CreateRun` trigger is stored under."""

RESOLVED_BY_THE_ENGINE = frozenset({EVENT_CLASSPATH, RUN_FINISHED_CLASSPATH, CREATE_RUN_CLASSPATH})
"""Triggers no triggerer leases nor runs: each tick resolves them from the database."""


async def _sleep_until(at: dt.datetime) -> None:
    import asyncio  # in the triggerer's loop; a DAG file's parse never needs it

    while (left := (at - dt.datetime.now(dt.UTC)).total_seconds()) > 0:
        await asyncio.sleep(min(left, 60.0))
