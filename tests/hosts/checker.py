"""The fault tests' checker: every try's start and end as the hosts wrote them
(`tests.hosts.dag`), held against the database.

`check` asserts, for the runs of one DAG:
- every run finished, as `success`;
- nothing is left unfinished: no run `queued` or `running`, no TI of the DAG in any state
  but `success` (so none `queued`, `running`, `scheduled`, `up_for_retry`);
- each TI has exactly one recorded result: one `success` among its row and its earlier
  tries (`task_try`), and that try's body started and ended on a host (its attempt id);
- no two tries of a TI overlap in time: neither the bodies the hosts recorded (a start
  before the end of an earlier one) nor the tries the database recorded;
- every body that started ended (none was cut short with its process);
- with `bodies_once`: each TI's body ran exactly once, as its first and only try.

Call it once the hosts are stopped (`Hosts.stop_all`: a worker's warm shutdown waits for
its tries), so a late duplicate has written its lines.
"""

from __future__ import annotations

import collections
import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

TiKey = tuple[str, str, int]
"""(run_id, task_id, map_index)."""


@dataclass(frozen=True)
class Body:
    """One execution of a task's body, as the host that ran it recorded it."""

    run_id: str
    task_id: str
    map_index: int
    try_number: int
    attempt_id: str
    host: str
    pid: int
    start_ns: int
    end_ns: int | None

    @property
    def ti(self) -> TiKey:
        return (self.run_id, self.task_id, self.map_index)

    def __str__(self) -> str:
        took = (
            "never ended" if self.end_ns is None else f"{(self.end_ns - self.start_ns) / 1e9:.3f}s"
        )
        return (
            f"try {self.try_number} ({self.attempt_id[:8]}) on {self.host} pid {self.pid} "
            f"at {self.start_ns / 1e9:.3f}, {took}"
        )


def read_bodies(root: Path) -> list[Body]:
    """Every body recorded under `root` (each host's `tries.log`), each `start` paired with
    the `end` (or `cut`: stopped then) that follows it in the same process."""
    bodies: list[Body] = []
    for log in sorted(root.glob("*/tries.log")):
        started: dict[tuple[str, ...], list[list[str]]] = collections.defaultdict(list)
        for line in log.read_text().splitlines():
            kind, *fields = line.split()
            key = tuple(fields[:7])  # all but the time
            if kind == "start":
                started[key].append(fields)
            elif kind in ("end", "cut"):  # cut: the body was stopped, then
                assert started[key], f"{log}: an end with no start: {line}"
                begun = started[key].pop()
                bodies.append(_body(begun, int(fields[7])))
        bodies.extend(_body(begun, None) for opened in started.values() for begun in opened)
    return bodies


def _body(fields: list[str], end_ns: int | None) -> Body:
    run_id, task_id, index, try_number, attempt_id, host, pid, start = fields
    return Body(
        run_id, task_id, int(index), int(try_number), attempt_id, host, int(pid), int(start), end_ns
    )


@dataclass(frozen=True)
class DbTry:
    try_number: int
    state: str
    attempt_id: str | None
    start: dt.datetime | None
    end: dt.datetime | None


@dataclass
class Report:
    """What `check` read: for a test's own assertions and its failure messages."""

    bodies: list[Body]
    runs: dict[str, str]
    tis: dict[TiKey, dict[str, Any]]
    tries: dict[TiKey, list[DbTry]]

    def bodies_of(self, ti: TiKey) -> list[Body]:
        return sorted((b for b in self.bodies if b.ti == ti), key=lambda b: b.start_ns)

    @property
    def executions(self) -> int:
        return len(self.bodies)


def read_database(
    database_url: str, dag_id: str
) -> tuple[dict[str, str], dict[TiKey, dict[str, Any]], dict[TiKey, list[DbTry]]]:
    engine = create_engine(database_url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            runs: dict[str, str] = dict(
                conn.execute(
                    text("SELECT run_id, state FROM dag_run WHERE dag_id = :d"), {"d": dag_id}
                ).all()
            )
            rows = conn.execute(
                text(
                    "SELECT id, run_id, task_id, map_index, state, try_number, attempt_id, "
                    "start_date, end_date FROM task_instance WHERE dag_id = :d"
                ),
                {"d": dag_id},
            ).mappings()
            tis = {(r["run_id"], r["task_id"], r["map_index"]): dict(r) for r in rows}
            by_id = {ti["id"]: key for key, ti in tis.items()}
            tries: dict[TiKey, list[DbTry]] = collections.defaultdict(list)
            earlier = conn.execute(
                text(
                    "SELECT tt.ti_id, tt.try_number, tt.state, tt.start_date, tt.end_date "
                    "FROM task_try tt JOIN task_instance ti ON ti.id = tt.ti_id "
                    "WHERE ti.dag_id = :d ORDER BY tt.try_number"
                ),
                {"d": dag_id},
            ).all()
            for ti_id, number, state, start, end in earlier:
                tries[by_id[ti_id]].append(DbTry(number, state, None, start, end))
            for key, ti in tis.items():
                if ti["try_number"] > 0:
                    tries[key].append(
                        DbTry(
                            ti["try_number"],
                            ti["state"],
                            ti["attempt_id"],
                            ti["start_date"],
                            ti["end_date"],
                        )
                    )
            return runs, tis, dict(tries)
    finally:
        engine.dispose()


def body_problems(key: TiKey, bodies: list[Body], *, bodies_once: bool) -> list[str]:
    """What is wrong with the bodies of one TI (ordered by start) as the hosts recorded
    them: one cut short, two that overlap, not exactly one (`bodies_once`), none."""
    problems = [f"TI {key}: a body cut short: {b}" for b in bodies if b.end_ns is None]
    for before, after in zip(bodies, bodies[1:], strict=False):
        if before.end_ns is None or after.start_ns < before.end_ns:
            problems.append(f"TI {key}: two tries overlap: {before} / {after}")
    if bodies_once and len(bodies) != 1:
        problems.append(f"TI {key}: body ran {len(bodies)} times: {[str(b) for b in bodies]}")
    if not bodies:
        problems.append(f"TI {key}: no body ran")
    return problems


def check(
    database_url: str,
    root: Path,
    dag_id: str,
    run_ids: Iterable[str],
    task_ids: Iterable[str],
    *,
    bodies_once: bool,
) -> Report:
    """Assert the invariants above (every problem found, in one AssertionError)."""
    run_ids, task_ids = list(run_ids), list(task_ids)
    runs, tis, tries = read_database(database_url, dag_id)
    report = Report(read_bodies(root), runs, tis, tries)
    problems: list[str] = []

    # every run finishes, and nothing is left queued or running
    for run_id in run_ids:
        if runs.get(run_id) != "success":
            problems.append(f"run {run_id} is {runs.get(run_id)!r}, not success")
    for run_id, state in runs.items():
        if state in ("queued", "running"):
            problems.append(f"run {run_id} left {state}")
    expected = {(r, t, -1) for r in run_ids for t in task_ids}
    problems += [f"TI {key} missing" for key in sorted(expected - set(tis))]
    for key, ti in sorted(tis.items()):
        if ti["state"] != "success":
            problems.append(f"TI {key} left {ti['state']} (try {ti['try_number']})")

    for key in sorted(expected & set(tis)):
        ti, bodies = tis[key], report.bodies_of(key)
        db_tries = tries.get(key, [])
        # exactly one recorded result, and its body ran on a host
        successes = [t for t in db_tries if t.state == "success"]
        if len(successes) != 1:
            problems.append(f"TI {key}: {len(successes)} successful tries recorded: {db_tries}")
        if ti["state"] == "success":
            ran = [b for b in bodies if b.attempt_id == ti["attempt_id"] and b.end_ns is not None]
            if not ran:
                problems.append(
                    f"TI {key}: success of try {ti['try_number']} ({ti['attempt_id']}) with "
                    f"no body of that attempt ended on a host: {[str(b) for b in bodies]}"
                )
        problems += body_problems(key, bodies, bodies_once=bodies_once)
        # no two recorded tries overlap
        timed = sorted(
            ((t.start, t) for t in db_tries if t.start is not None), key=lambda pair: pair[0]
        )
        for (_, first), (start, then) in zip(timed, timed[1:], strict=False):
            if first.end is None or start < first.end:
                problems.append(f"TI {key}: recorded tries overlap: {first} / {then}")
        if bodies_once and (ti["try_number"] != 1 or len(db_tries) != 1):
            problems.append(f"TI {key}: {len(db_tries)} tries recorded: {db_tries}")

    strays = {b.ti for b in report.bodies} - expected
    problems += [f"a body of a TI not expected: {key}" for key in sorted(strays)]
    if problems:
        shown = "\n  ".join(problems[:40])
        more = f"\n  … and {len(problems) - 40} more" if len(problems) > 40 else ""
        raise AssertionError(f"{len(problems)} problems:\n  {shown}{more}")
    return report
