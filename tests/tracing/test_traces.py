"""Every DAG run is one trace, whichever scheduler starts, ends or loses it.

Real `sluice scheduler` and `sluice worker` processes export to a small OTLP/HTTP
receiver running in the test; the checks are on what they exported.
"""

from __future__ import annotations

import signal
import textwrap
import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from tests.otlp_receiver import OtlpGrpcReceiver, OtlpReceiver, ReceivedSpan, SpanCollector
from tests.procs import Process, Sluice, wait_until
from tests.tracing.trees import check_run_tree, export_to

DAG_FILE = """
import os
import time
from opentelemetry import trace
from sluice import DAG, task


def work(context, seconds, gate=None):
    with trace.get_tracer("user.code").start_as_current_span(f"user {{context['task_id']}}"):
        time.sleep(seconds)
        deadline = time.monotonic() + 60
        while gate and not os.path.exists(gate) and time.monotonic() < deadline:
            time.sleep(0.02)


with DAG("traced", schedule=None) as dag:
    @task
    def first(context):
        work(context, 0.01)
        return 1

    @task
    def slow(context):
        work(context, {sleep}, {gate!r})

    @task
    def last(context):
        work(context, 0)
        return 2

    first >> slow >> last
"""


@pytest.fixture
def traced(sluice: Sluice, receiver: OtlpReceiver) -> Sluice:
    return export_to(sluice, receiver)


def run_row(sluice: Sluice, run_id: str) -> dict:
    engine = create_engine(sluice.database_url)
    try:
        with engine.connect() as conn:
            row = conn.execute(
                text(
                    "SELECT context_carrier, span_status, started_by_job_id FROM dag_run "
                    "WHERE run_id = :r"
                ),
                {"r": run_id},
            ).one()
    finally:
        engine.dispose()
    carrier = row[0] if isinstance(row[0], dict) else __import__("json").loads(row[0])
    return {"carrier": carrier, "span_status": row[1], "owner": row[2]}


def scheduler_job_ids(sluice: Sluice) -> list[int]:
    engine = create_engine(sluice.database_url)
    try:
        with engine.connect() as conn:
            return list(
                conn.execute(
                    text("SELECT id FROM job WHERE job_type = 'scheduler' ORDER BY id")
                ).scalars()
            )
    finally:
        engine.dispose()


def check_one_tree(sluice: Sluice, receiver: SpanCollector, run_id: str) -> list[ReceivedSpan]:
    """The run's trace is one tree with every task's spans where they belong
    (`trees.check_run_tree`: every task, not only the first)."""
    tis = sluice.task_states("traced", run_id)
    return check_run_tree(receiver, trace_id_of(sluice, run_id), "traced", tis).spans


def write_dag(sluice: Sluice, sleep: float, gate: Path | None = None) -> None:
    """The DAG "traced"; its task "slow" sleeps `sleep` s, then waits until `gate` exists."""
    dag = DAG_FILE.format(sleep=sleep, gate=None if gate is None else str(gate))
    (sluice.dags_folder / "traced.py").write_text(textwrap.dedent(dag))


def gate_of(sluice: Sluice) -> Path:
    """The file "slow" waits for in `start_owner`'s runs (`open_gate` lets it end)."""
    return sluice.dags_folder.parent / "slow.gate"


def open_gate(sluice: Sluice) -> None:
    gate_of(sluice).touch()


def run_once(sluice: Sluice) -> tuple[str, str]:
    """One scheduler and one worker run the DAG once, to its spans' end: (run id, trace id)."""
    write_dag(sluice, 0.05)
    sluice.scheduler()
    sluice.worker()
    run_id = sluice.trigger("traced")
    assert sluice.wait_run("traced", run_id) == "success"
    wait_until(lambda: run_row(sluice, run_id)["span_status"] == "ended", timeout=20)
    return run_id, trace_id_of(sluice, run_id)


def trace_id_of(sluice: Sluice, run_id: str) -> str:
    """The trace id in the run's stored carrier."""
    return str(run_row(sluice, run_id)["carrier"]["traceparent"].split("-")[1])


def test_one_scheduler_one_worker(traced: Sluice, receiver: OtlpReceiver) -> None:
    run_id, _ = run_once(traced)
    spans = check_one_tree(traced, receiver, run_id)
    run_span = next(s for s in spans if not s.parent_id)
    assert run_span.attributes["run_id"] == run_id and run_span.attributes["state"] == "success"


def start_owner(traced: Sluice) -> tuple[Process, str]:
    """Scheduler A starts a run; returns (A, run_id) once its task "slow" is running.

    "slow" runs until the test calls `open_gate`: what the test does to A meanwhile
    happens while the run is unfinished, however slow the machine."""
    write_dag(traced, 0, gate_of(traced))
    a = traced.scheduler()
    traced.worker()
    run_id = traced.trigger("traced")
    wait_until(
        lambda: traced.db_task_states("traced", run_id)["slow"]["state"] == "running", timeout=30
    )
    assert run_row(traced, run_id)["owner"] == scheduler_job_ids(traced)[0]
    return a, run_id


def pause_between_transactions(sluice: Sluice, proc: Process, app: str) -> None:
    """SIGSTOP `proc` at a moment none of its connections (`application_name` `app`) is in
    a transaction: paused inside one, it would keep its row locks (the run's) until resumed."""
    engine = create_engine(sluice.database_url)
    busy = text(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND application_name = :app AND state <> 'idle'"
    )
    try:
        for _ in range(200):
            proc.send_signal(signal.SIGSTOP)
            with engine.connect() as conn:
                if not conn.execute(busy, {"app": app}).scalar():
                    return
            proc.send_signal(signal.SIGCONT)
            time.sleep(0.005)
    finally:
        engine.dispose()
    raise AssertionError(f"{app} was always inside a transaction")


def test_spans_go_over_otlp_grpc_too(sluice: Sluice) -> None:
    """OTEL_EXPORTER_OTLP_PROTOCOL=grpc: the scheduler's and the worker's spans reach a
    gRPC trace service as one tree."""
    receiver = OtlpGrpcReceiver()
    try:
        sluice.extra_env.update(
            OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
            OTEL_EXPORTER_OTLP_PROTOCOL="grpc",
            OTEL_EXPORTER_OTLP_INSECURE="true",
            OTEL_BSP_SCHEDULE_DELAY="100",
            OTEL_METRICS_EXPORTER="none",
        )
        run_id, _ = run_once(sluice)
        check_one_tree(sluice, receiver, run_id)
    finally:
        receiver.close()


def test_paused_owner_ends_its_span_after_another_finishes(
    traced: Sluice, receiver: OtlpReceiver
) -> None:
    traced.extra_env["SLUICE_HEARTBEAT_TIMEOUT"] = "60"  # A is paused, not dead
    a, run_id = start_owner(traced)
    pause_between_transactions(traced, a, "sluice-scheduler")  # before it can finish the run
    open_gate(traced)
    traced.scheduler()  # B
    try:
        assert traced.wait_run("traced", run_id, timeout=60) == "success"
        wait_until(lambda: run_row(traced, run_id)["span_status"] == "should_end", timeout=20)
    finally:
        a.send_signal(signal.SIGCONT)
    wait_until(lambda: run_row(traced, run_id)["span_status"] == "ended", timeout=20)
    check_one_tree(traced, receiver, run_id)


def test_sigterm_owner_leaves_continued_spans(traced: Sluice, receiver: OtlpReceiver) -> None:
    a, run_id = start_owner(traced)
    traced.stop(a)  # SIGTERM: ends its spans, marks them needs_continuance
    assert run_row(traced, run_id)["span_status"] == "needs_continuance"
    open_gate(traced)
    traced.scheduler()  # B continues
    assert traced.wait_run("traced", run_id, timeout=60) == "success"
    wait_until(lambda: run_row(traced, run_id)["span_status"] == "ended", timeout=20)
    spans = check_one_tree(traced, receiver, run_id)
    names = [s.name for s in spans]
    assert "scheduler exited" in names
    assert "dag_run traced continued" in names and "task slow continued" in names
    last = next(s for s in spans if s.name == "task last")
    continued = next(s for s in spans if s.name == "dag_run traced continued")
    assert last.parent_id == continued.span_id  # the rest of the run nests under it


def test_a_run_waiting_for_continuance_is_not_carried_on_by_workers(
    traced: Sluice, receiver: OtlpReceiver
) -> None:
    """A's spans await continuance; "slow" ends before B starts: the worker leaves
    "last" to B, so that it nests under B's continued span, and B ends the run's span."""
    # "slow" ends only after A has stopped (and said so)
    a, run_id = start_owner(traced)
    traced.stop(a)
    assert run_row(traced, run_id)["span_status"] == "needs_continuance"
    open_gate(traced)
    wait_until(lambda: traced.db_task_states("traced", run_id)["slow"]["state"] == "success")
    assert traced.db_task_states("traced", run_id)["last"]["state"] == "none"
    traced.scheduler()  # B
    assert traced.wait_run("traced", run_id, timeout=60) == "success"
    wait_until(lambda: run_row(traced, run_id)["span_status"] == "ended", timeout=20)
    spans = check_one_tree(traced, receiver, run_id)
    last = next(s for s in spans if s.name == "task last")
    continued = next(s for s in spans if s.name == "dag_run traced continued")
    assert last.parent_id == continued.span_id


def test_sigkill_owner_spans_are_recreated(traced: Sluice, receiver: OtlpReceiver) -> None:
    traced.extra_env["SLUICE_HEARTBEAT_TIMEOUT"] = "3"
    traced.extra_env["SLUICE_PARSE_TIMEOUT"] = "2"  # below the heartbeat timeout
    a, run_id = start_owner(traced)
    first_span_id = run_row(traced, run_id)["carrier"]["traceparent"].split("-")[2]
    a.send_signal(signal.SIGKILL)
    a.wait()
    open_gate(traced)
    traced.scheduler()  # B
    assert traced.wait_run("traced", run_id, timeout=60) == "success"
    wait_until(lambda: run_row(traced, run_id)["span_status"] == "ended", timeout=30)
    spans = check_one_tree(traced, receiver, run_id)
    root = next(s for s in spans if not s.parent_id)
    assert root.name == "dag_run traced recreated" and root.span_id == first_span_id
    assert any(s.name == "task slow recreated" for s in spans)


def test_cleared_run_stays_one_trace(traced: Sluice, receiver: OtlpReceiver) -> None:
    run_id, _ = run_once(traced)
    traced.ok("tasks", "clear", "traced", run_id, "--task", "last")
    wait_until(lambda: traced.task_states("traced", run_id)["last"]["try_number"] == 2)
    assert traced.wait_run("traced", run_id) == "success"
    wait_until(lambda: run_row(traced, run_id)["span_status"] == "ended", timeout=20)
    spans = check_one_tree(traced, receiver, run_id)
    continued = next(s for s in spans if s.name == "dag_run traced continued")
    lasts = [s for s in spans if s.name == "task last"]
    assert len(lasts) == 2 and len({s.span_id for s in lasts}) == 2
    assert any(s.parent_id == continued.span_id for s in lasts)
