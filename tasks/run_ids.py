"""Run ids: the rules every run id follows (`run_id_problem`, which
`scheduler.scheduling.dagrun.check_run_id` applies to every run id a user or a task
gives: not empty, no leading or trailing spaces, no '/', no NUL, valid UTF-8, at most
RUN_ID_MAX characters), and the ids Sluice derives from text that need not follow them
(`bounded_run_id`): a `TriggerDagRun` TI's (`derived_run_id`) and a watch's run key's
(`tasks.watch.run_id_of`).

`derived_run_id` is a function of the triggering TI alone (its DAG, run, task and map
index), so every try of that TI names the same run: a retry finds the run its first try
created instead of creating a second one.
"""

from __future__ import annotations

import hashlib
import re

RUN_ID_MAX = 250
"""Longest run id (the `dag_run.run_id` column; `scheduling.dagrun.RUN_ID_MAX`)."""

DERIVED_PREFIX = "triggered__"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.:+~-]")
"""What a derived run id does not keep of its parts (replaced by `_`): anything but
letters, digits and `_ . : + ~ -`, so that the id is plain in a URL, a log and a shell."""
_DIGEST = 16
"""Hex digits of the sha256 that ends a derived id whose parts were cleaned or cut."""


def run_id_problem(run_id: object) -> str | None:
    """Why `run_id` may not name a run (one line), or None if it may."""
    if not isinstance(run_id, str):
        return f"must be text, got {type(run_id).__name__}"
    if not run_id.strip():
        return "must not be empty"
    if run_id != run_id.strip():
        return "must not start or end with spaces"
    if "/" in run_id:
        return "must not contain '/' (it could not be named in a URL)"
    if "\x00" in run_id:
        return "must not contain NUL characters"
    if len(run_id) > RUN_ID_MAX:
        return f"must be at most {RUN_ID_MAX} characters"
    try:
        run_id.encode("utf-8")
    except UnicodeEncodeError:
        return "must be valid UTF-8 text"
    return None


def derived_run_id(dag_id: str, run_id: str, task_id: str, map_index: int | None = None) -> str:
    """The run id a TriggerDagRun TI gives the run it creates when it names none:
    `triggered__<dag_id>__<run_id>__<task_id>[__<map_index>]`, bounded (`bounded_run_id`).
    Deterministic: every try of one TI gets the same id."""
    raw = f"{DERIVED_PREFIX}{dag_id}__{run_id}__{task_id}"
    if map_index is not None and map_index >= 0:
        raw += f"__{map_index}"
    return bounded_run_id(raw)


def bounded_run_id(raw: str) -> str:
    """`raw` as a run id: its characters other than letters, digits and `_ . : + ~ -`
    become `_`, and the id is then ended by `~` and 16 hex digits of the sha256 of `raw`
    (two texts that clean alike still name two runs); one over RUN_ID_MAX is cut and ended
    the same way. `raw` itself when it needs neither."""
    cleaned = _UNSAFE.sub("_", raw)
    if cleaned == raw and len(raw) <= RUN_ID_MAX:
        return raw
    digest = hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:_DIGEST]
    head = cleaned[: RUN_ID_MAX - _DIGEST - 1]
    return f"{head}~{digest}"
