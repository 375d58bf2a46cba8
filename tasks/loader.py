"""Finding and importing DAG files in-process.

``load_file`` imports one file as module ``sluice_dag_<sha1 of its absolute path>`` with the
file's folder on ``sys.path`` (so it can import sibling helpers; the folder stays there, and
helpers stay cached in ``sys.modules`` like any import). It returns every DAG in the
module's globals or constructed while it ran, validated, with ``fileloc`` set to the file.
``DagCache`` keeps loaded files by (path, mtime_ns, size) for workers that need the real
callables. The scheduler parses files in a subprocess instead (``tasks.parsing``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from sluice.tasks.dag import DAG, collect_dags
from sluice.tasks.errors import DagDefinitionError, TaskTimeout
from sluice.tasks.runtime import call_with_timeout

DAG_MODULE_PREFIX = "sluice_dag_"
"""What the module name of every DAG file starts with (`module_name_for`)."""


def module_name_for(path: str | os.PathLike[str]) -> str:
    """The module name a DAG file is imported under (stable for one absolute path)."""
    digest = hashlib.sha1(str(Path(path).resolve()).encode("utf-8")).hexdigest()
    return f"{DAG_MODULE_PREFIX}{digest}"


def load_file(path: str | os.PathLike[str]) -> list[DAG]:
    """Import the DAG file at ``path`` and return its validated DAGs (may be empty).

    Import errors propagate unchanged; a cycle or a dag_id defined twice in the file raises
    ``DagDefinitionError``.
    """
    file = Path(path).resolve()
    name = module_name_for(file)
    folder = str(file.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {file}: not a Python source file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        with collect_dags() as constructed:
            spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    dags: list[DAG] = []
    for candidate in [*constructed, *vars(module).values()]:
        if isinstance(candidate, DAG) and all(candidate is not d for d in dags):
            dags.append(candidate)
    seen: set[str] = set()
    for dag in dags:
        if dag.dag_id in seen:
            raise DagDefinitionError(f"dag_id '{dag.dag_id}' is defined twice in {file.name}")
        seen.add(dag.dag_id)
        dag.fileloc = str(file)
        dag.validate()
    return dags


def list_dag_files(folder: str | os.PathLike[str]) -> list[Path]:
    """``*.py`` files under ``folder`` that mention "dag" (any case), sorted.

    Files and folders whose name starts with ``_`` or ``.`` are skipped. A missing folder
    gives an empty list.
    """
    root = Path(folder)
    if not root.is_dir():
        return []
    found: list[Path] = []
    for file in root.rglob("*.py"):
        parts = file.relative_to(root).parts
        if any(part.startswith(("_", ".")) for part in parts) or not file.is_file():
            continue
        try:
            if b"dag" in file.read_bytes().lower():
                found.append(file)
        except OSError:
            continue
    return sorted(found)


@dataclass(frozen=True)
class _Entry:
    mtime_ns: int
    size: int
    dags: dict[str, DAG]


class DagCache:
    """DAGs loaded in-process, keyed by file; a file is re-imported when it changes.

    Thread-safe: one lock per file around its import, so a file that is slow to import
    holds up only the tasks of that file. With `timeout`, an import that runs longer
    raises ``TaskTimeout`` inside it (see ``runtime.call_with_timeout``), and a task that
    waits for another thread's import of its file waits no longer than that either.
    """

    def __init__(self, timeout: float | None = None) -> None:
        self.timeout = timeout
        self._entries: dict[str, _Entry] = {}
        self._resolved: dict[str, str] = {}
        """fileloc → its resolved path: resolving walks every component (a syscall each),
        and a worker asks for the same few files on every task."""
        self._locks: dict[str, threading.Lock] = {}
        self._locks_lock = threading.Lock()

    def _lock_of(self, path: str) -> threading.Lock:
        with self._locks_lock:
            return self._locks.setdefault(path, threading.Lock())

    def get_dag(self, fileloc: str | os.PathLike[str], dag_id: str) -> DAG:
        """The DAG ``dag_id`` defined in ``fileloc``; ``KeyError`` if the file lacks it,
        ``TaskTimeout`` if importing it took longer than `timeout`."""
        key = os.fspath(fileloc)
        path = self._resolved.get(key)
        if path is None:
            path = self._resolved[key] = str(Path(key).resolve())
        stat = os.stat(path)
        entry = self._entries.get(path)
        if entry is None or (entry.mtime_ns, entry.size) != (stat.st_mtime_ns, stat.st_size):
            entry = self._load(path, stat)
        try:
            return entry.dags[dag_id]
        except KeyError:
            found = ", ".join(sorted(entry.dags)) or "none"
            raise KeyError(
                f"DAG '{dag_id}' is not defined in {path} (DAGs found there: {found})"
            ) from None

    def _load(self, path: str, stat: os.stat_result) -> _Entry:
        lock = self._lock_of(path)
        timeout = self.timeout
        what = f"importing the DAG file {path} took longer than {timeout or 0:g}s"
        if not lock.acquire(timeout=-1 if timeout is None else timeout):
            raise TaskTimeout(what)
        try:
            entry = self._entries.get(path)  # another thread may have imported it meanwhile
            if entry is not None and (entry.mtime_ns, entry.size) == (
                stat.st_mtime_ns,
                stat.st_size,
            ):
                return entry

            def load() -> dict[str, DAG]:
                return {dag.dag_id: dag for dag in load_file(path)}

            dags = load() if timeout is None else call_with_timeout(load, timeout, what)
            entry = self._entries[path] = _Entry(stat.st_mtime_ns, stat.st_size, dags)
            return entry
        finally:
            lock.release()

    def clear(self) -> None:
        """Forget every loaded file."""
        with self._locks_lock:
            self._entries.clear()
            self._resolved.clear()
