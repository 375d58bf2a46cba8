"""The triggerer's watches (`sluice.Watch`): a thread of its own that leases due watches,
and up to `AT_ONCE` evaluations at once, each in a daemon thread and a subprocess
(`tasks.watching`: user code, bounded by the watch's `timeout`, without the deployment's
secrets), each recording what it made (`scheduling.watch_runs`). A watch that hangs holds
one of them until its timeout, never the others; the evaluations still running when the
triggerer stops are killed (their leases released: another triggerer evaluates them).

A watch that raises, hangs or answers badly gets its error recorded (`dag_watch.last_error`,
shown by `sluice dags list`, the API and the UI) and is evaluated again at its next
interval; its cursor and keys are kept. A watch leased by a triggerer that died is taken
over once its lease (the watch's timeout and a heartbeat timeout) has passed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable

from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker

from sluice.scheduler.core.bundles import bundles_of, local_file
from sluice.scheduler.core.db import transaction, utcnow
from sluice.scheduler.core.models import Dag
from sluice.scheduler.core.queries.watches import lease_due, release_leases, watch_of
from sluice.scheduler.core.settings import SECRET_VARIABLES, Settings
from sluice.scheduler.scheduling.watch_runs import record_evaluation
from sluice.tasks.watching import Evaluation, evaluate

log = logging.getLogger(__name__)

IDLE = 0.5
"""Seconds between two looks for a due watch when none was due (or none could start)."""
AT_ONCE = 4
"""Most evaluations one triggerer runs at once."""


class Watcher:
    """Evaluates due watches in a daemon thread, as job `owner` (the triggerer's id)."""

    def __init__(
        self,
        settings: Settings,
        factory: sessionmaker[Session],
        owner: Callable[[], int | None],
        wake: Callable[[], None],
    ) -> None:
        self.settings = settings
        self.factory = factory
        self.owner = owner
        self.wake = wake
        self.gits = bundles_of(settings)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="sluice-watches", daemon=True)
        self._room = threading.Semaphore(AT_ONCE)
        self._running: set[int] = set()
        """The evaluations' subprocesses (each its process group), killed at `stop`."""

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for pid in list(self._running):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        owner = self.owner()
        if owner is not None:
            with transaction(self.factory) as session:
                release_leases(session, owner)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                busy = self.step()
            except DBAPIError as exc:
                log.warning("evaluating watches failed (database: %s), trying again", exc.orig)
                busy = False
            if not busy:
                self._stop.wait(IDLE)

    def step(self) -> bool:
        """Lease one due watch and start its evaluation, if one is due and one of the
        pool's threads is free; whether one started."""
        owner = self.owner()
        if owner is None or not self._room.acquire(blocking=False):
            return False
        try:
            with transaction(self.factory) as session:
                dag = lease_due(session, owner, utcnow(), self._lease_of)
                if dag is not None:
                    session.expunge(dag)
        except BaseException:
            self._room.release()
            raise
        if dag is None:
            self._room.release()
            return False
        threading.Thread(
            target=self._evaluated, args=(dag, owner), name="sluice-watch", daemon=True
        ).start()
        return True

    def _evaluated(self, dag: Dag, owner: int) -> None:
        try:
            self.evaluate_and_record(dag, owner)
        except Exception as exc:  # a database error: the lease lapses, another one tries
            log.warning("recording the watch of %s failed: %s", dag.dag_id, exc)
        finally:
            self._room.release()

    def evaluate_and_record(self, dag: Dag, owner: int) -> None:
        """Evaluate `dag`'s watch (leased to `owner`) and record what it made."""
        evaluation = self._evaluate(dag)
        with transaction(self.factory) as session:
            session.add(dag)
            recorded = record_evaluation(session, dag, owner, evaluation, utcnow())
        if recorded.runs is None:
            log.warning("the watch of %s was taken over meanwhile: nothing recorded", dag.dag_id)
        elif evaluation.error is not None:
            log.warning("the watch of %s failed: %s", dag.dag_id, evaluation.error)
        elif recorded.runs:
            log.info("the watch of %s made %d run(s)", dag.dag_id, len(recorded.runs))
            self.wake()

    def _lease_of(self, dag: Dag) -> float:
        """A watch is leased for its timeout and a heartbeat timeout: past that, the
        triggerer evaluating it is dead or cut off, and another one may."""
        return _timeout_of(dag) + self.settings.heartbeat_timeout

    def _evaluate(self, dag: Dag) -> Evaluation:
        timeout = _timeout_of(dag)
        with transaction(self.factory) as session:
            watch = watch_of(session, dag.dag_id)
            cursor = watch.cursor if watch is not None else None
        try:
            path = local_file(self.gits, dag.fileloc, dag.bundle_version, "triggerer")
        except Exception as exc:
            return Evaluation(error=f"{type(exc).__name__}: {exc}"[:2000])
        return evaluate(
            path,
            dag.dag_id,
            cursor,
            timeout=timeout,
            max_conf_bytes=self.settings.max_conf_bytes,
            max_conf_depth=self.settings.max_conf_depth,
            drop_env=SECRET_VARIABLES,
            running=self._running,
        )


def _timeout_of(dag: Dag) -> float:
    spec = (dag.serialized.get("schedule") or {}).get("watch") or {}
    return float(spec.get("timeout", 60))
