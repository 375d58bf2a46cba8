"""What a user checks in the trace viewer: one tree per run, every task where it belongs.

`check_run_tree` waits until the run's trace is complete and then asserts the whole
contract, for every task instance of the run, not only the first:
- one root (the run's span) and no span whose parent is missing;
- every TI of the run has a `task <task_id>` span with its final state, whether a worker
  ran it or not (skipped, upstream_failed, removed);
- every try a worker ran has its `run/sluice.run_task_instance` span directly under
  `task <task_id>` of that TI (never under another task's worker or publish span), and
  the spans its code opened (`user <task_id>`, by the test DAGs' convention) under that
  try's `run/…` span.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from tests.otlp_receiver import OtlpReceiver, ReceivedSpan, SpanCollector
from tests.procs import Sluice

RUN_SPAN = "run/sluice.run_task_instance"


def export_to(sluice: Sluice, receiver: OtlpReceiver, **env: str) -> Sluice:
    """`sluice`'s processes export their spans (traces only) to `receiver`, with `env`."""
    sluice.extra_env.update(
        OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
        OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
        OTEL_BSP_SCHEDULE_DELAY="100",
        OTEL_BSP_MAX_QUEUE_SIZE="20000",
        OTEL_METRICS_EXPORTER="none",  # metrics are tested in tests/operators
        **env,
    )
    return sluice


def base_name(span: ReceivedSpan) -> str:
    """A span's name without the `continued` / `recreated` suffixes of a takeover."""
    return span.name.split(" continued")[0].split(" recreated")[0]


@dataclass
class Tree:
    spans: list[ReceivedSpan]

    def __post_init__(self) -> None:
        self.by_id = {s.span_id: s for s in self.spans}

    def parent(self, span: ReceivedSpan) -> ReceivedSpan:
        return self.by_id[span.parent_id]

    def path(self, span: ReceivedSpan) -> str:
        """`span -> parent -> … -> root`, for failure messages."""
        names = [span.name]
        while span.parent_id in self.by_id:
            span = self.by_id[span.parent_id]
            names.append(span.name)
        return " -> ".join(names)

    def named(self, name: str) -> list[ReceivedSpan]:
        return [s for s in self.spans if base_name(s) == name]

    def worker_runs(self, task_id: str) -> list[ReceivedSpan]:
        return [
            s for s in self.spans if s.name == RUN_SPAN and s.attributes.get("task_id") == task_id
        ]


def check_run_tree(
    collector: SpanCollector,
    trace_id: str,
    dag_id: str,
    tis: Mapping[str, Mapping[str, Any]],
    timeout: float = 30,
    no_user_spans: Collection[str] = (),
) -> Tree:
    """Wait for the trace of a finished run to satisfy the contract above; return it.

    `tis` is the run's task instances as `sluice tasks states --json` prints them, by
    task id. A TI with a `hostname` was claimed by a worker: each of its tries 1 ..
    `try_number` must have a worker span, and a user span unless its task id is in
    `no_user_spans` (a CeleryTask runs no code of the DAG's).
    """
    deadline = time.monotonic() + timeout
    while True:
        tree = Tree(collector.trace(trace_id))
        try:
            _check(tree, dag_id, tis, no_user_spans)
            return tree
        except (AssertionError, KeyError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _check(
    tree: Tree,
    dag_id: str,
    tis: Mapping[str, Mapping[str, Any]],
    no_user_spans: Collection[str],
) -> None:
    roots = [s for s in tree.spans if not s.parent_id]
    assert [base_name(r) for r in roots] == [f"dag_run {dag_id}"], f"roots: {roots}"
    orphans = [s.name for s in tree.spans if s.parent_id not in tree.by_id and s.parent_id]
    assert not orphans, f"spans whose parent is missing: {orphans}"
    for key, ti in tis.items():
        task_id = str(ti.get("task_id") or key)
        task_spans = tree.named(f"task {key}")
        assert task_spans, f"no span for task {key} ({ti['state']})"
        for span in task_spans:
            assert span.attributes["task_id"] == task_id
            assert span.attributes["dag_id"] == dag_id
            assert span.attributes.get("map_index") == ti.get("map_index")
            assert {"run_id", "try_number", "queue", "state"} <= set(span.attributes)
        states = {s.attributes["state"] for s in task_spans}
        assert ti["state"] in states, f"task {key}: spans {states}, TI {ti['state']}"
        if ti.get("hostname"):
            _check_tries(tree, key, task_id, int(ti["try_number"]), task_id not in no_user_spans)
    for run in (s for s in tree.spans if s.name == RUN_SPAN):
        run_task = run.attributes.get("task_id")
        parent = base_name(tree.parent(run))
        assert parent.split("[")[0] == f"task {run_task}", f"worker span: {tree.path(run)}"


def _check_tries(tree: Tree, key: str, task_id: str, tries: int, user_spans: bool) -> None:
    """Tries 1..`tries` of TI `key` each have a worker span directly under its task span,
    and (`user_spans`) the span its code opened under one of those."""
    runs = [
        s for s in tree.spans if s.name == RUN_SPAN and base_name(tree.parent(s)) == f"task {key}"
    ]
    assert {r.attributes.get("try_number") for r in runs} >= set(range(1, tries + 1)), (
        f"task {key}: worker spans of tries {[r.attributes.get('try_number') for r in runs]}"
        f", {tries} tries"
    )
    if not user_spans:
        return
    run_ids = {r.span_id for r in runs}
    users = [u for u in tree.named(f"user {task_id}") if u.parent_id in run_ids]
    assert len(users) >= tries, f"task {key}: {len(users)} user spans for {tries} tries"
    for user in tree.named(f"user {task_id}"):
        parent = tree.parent(user)
        assert parent.name == RUN_SPAN and parent.attributes.get("task_id") == task_id, (
            f"user span: {tree.path(user)}"
        )
    attempts = {tree.parent(u).attributes.get("attempt_id") for u in users}
    assert len(attempts) >= tries, f"task {task_id}: user spans of {len(attempts)} tries"
