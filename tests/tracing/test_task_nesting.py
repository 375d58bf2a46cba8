"""Every task's spans sit under its own task span, whichever process queued it.

Real `sluice scheduler` and `sluice worker` processes export to the test's OTLP/HTTP
receiver. Each DAG shape below exercises one way a task instance gets published (a
scheduler pass, a worker's chain link, fan-in join, wide fan-in, a freed pool slot, a
retry); `trees.check_run_tree` checks the nesting of every task of every run.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Collection
from pathlib import Path

import pytest
import redis
from sqlalchemy import create_engine, text

from sluice.scheduler.decide.plans import READ_LIMIT
from tests.celery_compat.test_celery_task import their_worker
from tests.celery_compat.their_app import THEIR_QUEUE
from tests.otlp_receiver import OtlpReceiver
from tests.procs import Sluice, printed_states, standalone, wait_until
from tests.tracing.test_traces import run_row, trace_id_of
from tests.tracing.trees import Tree, check_run_tree, export_to

WIDE = READ_LIMIT + 1  # more upstreams than a worker reads: the wide fan-in's own path

SHAPES = f"""
import time
from datetime import timedelta
from opentelemetry import trace
from sluice import DAG, TriggerRule, task


def work(context):
    with trace.get_tracer("user.code").start_as_current_span(f"user {{context['task_id']}}"):
        time.sleep(0.002)


def flaky(context):
    work(context)
    if context["try_number"] == 1:
        raise RuntimeError("first try fails")


def boom(context):
    work(context)
    raise RuntimeError("always fails")


def fan(dag_id, width, pool=None):
    with DAG(dag_id, schedule=None) as dag:
        start = task(task_id="start")(work)
        middle = [task(task_id=f"m{{i}}", pool=pool)(work) for i in range(width)]
        end = task(task_id="end")(work)
        start >> middle
        middle >> end
    return dag


with DAG("chain5", schedule=None) as chain5:
    links = [task(task_id=f"t{{i}}")(work) for i in range(5)]
    for a, b in zip(links, links[1:]):
        a >> b

fanout = fan("fanout", 20)
widejoin = fan("widejoin", {WIDE})
pooled = fan("pooled", 5, pool="single")

with DAG("retried", schedule=None) as retried:
    first = task(task_id="flaky", retries=1, retry_delay=timedelta(0))(flaky)
    first >> task(task_id="after")(work)

with DAG("branched", schedule=None) as branched:
    @task.branch
    def pick(context):
        work(context)
        return "yes"

    yes = task(task_id="yes")(work)
    no = task(task_id="no")(work)
    after_no = task(task_id="after_no")(work)
    join = task(task_id="join", trigger_rule=TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS)(work)
    pick >> [yes, no]
    no >> after_no
    [yes, after_no] >> join

with DAG("failing", schedule=None) as failing:
    task(task_id="boom")(boom) >> task(task_id="never")(work)
"""

SHRINKING = """
import os
import time
from opentelemetry import trace
from sluice import DAG, task


def work(context):
    with trace.get_tracer("user.code").start_as_current_span(f"user {context['task_id']}"):
        time.sleep(0.002)


def hold(context):
    work(context)
    deadline = time.monotonic() + 60
    while not os.path.exists(GATE) and time.monotonic() < deadline:
        time.sleep(0.02)


with DAG(NAME, schedule=None) as dag:
    first = task(task_id="first")(hold)
    first >> task(task_id="kept")(work)
    GONE
"""

SHRINKS = ("shrinking", "dropping")

EXPECTED = {
    "chain5": "success",
    "fanout": "success",
    "widejoin": "success",
    "pooled": "success",
    "retried": "success",
    "branched": "success",
    "failing": "failed",
}


def check_run(
    sluice: Sluice,
    receiver: OtlpReceiver,
    dag_id: str,
    run_id: str,
    no_user_spans: Collection[str] = (),
) -> None:
    wait_until(lambda: run_row(sluice, run_id)["span_status"] == "ended", timeout=30)
    tis = sluice.db_task_states(dag_id, run_id)
    check_run_tree(receiver, trace_id_of(sluice, run_id), dag_id, tis, no_user_spans=no_user_spans)


def test_every_shape_nests_every_task_under_its_own_span(
    sluice: Sluice, receiver: OtlpReceiver
) -> None:
    # Given one scheduler, one worker, a one-slot pool and a DAG of each shape
    export_to(sluice, receiver)
    (sluice.dags_folder / "shapes.py").write_text(textwrap.dedent(SHAPES))
    # and two DAGs that lose "gone" while "first" runs until its gate opens: "shrinking"'s
    # once a scheduler removed "gone", "dropping"'s once the new version is stored (the
    # worker that ran "first" may then queue "gone", and removes it when it claims it)
    gates, files = {}, {}
    for name in SHRINKS:
        gates[name] = sluice.dags_folder.parent / f"{name}.gate"
        files[name] = SHRINKING.replace("NAME", repr(name)).replace("GATE", repr(str(gates[name])))
        (sluice.dags_folder / f"{name}.py").write_text(
            textwrap.dedent(files[name].replace("GONE", 'first >> task(task_id="gone")(work)'))
        )
    sluice.ok("pools", "set", "single", "1")
    sluice.scheduler()
    sluice.worker(concurrency=4)
    # When a run of each is triggered at once (and "gone" leaves its DAG while it runs)
    runs = {dag_id: sluice.trigger(dag_id) for dag_id in [*EXPECTED, *SHRINKS]}

    def first_runs() -> bool:
        return all(
            sluice.db_task_states(n, runs[n])["first"]["state"] == "running" for n in SHRINKS
        )

    wait_until(first_runs)
    for name in SHRINKS:
        (sluice.dags_folder / f"{name}.py").write_text(
            textwrap.dedent(files[name].replace("GONE", ""))
        )
    wait_until(lambda: sluice.db_stored_tasks("dropping") == {"first", "kept"}, timeout=30)
    gates["dropping"].touch()
    wait_until(
        lambda: sluice.db_task_states("shrinking", runs["shrinking"])["gone"]["state"] == "removed",
        timeout=30,
    )
    gates["shrinking"].touch()
    # Then each run ends as its shape says, and its trace has every task where it belongs
    for dag_id in runs:
        sluice.wait_run(dag_id, runs[dag_id], timeout=90)
    tis = {dag_id: sluice.db_task_states(dag_id, run_id) for dag_id, run_id in runs.items()}
    for dag_id, state in {**EXPECTED, "shrinking": "success", "dropping": "success"}.items():
        errors = {t: ti["error"] for t, ti in tis[dag_id].items() if ti["error"]}
        assert sluice.db_run_state(dag_id, runs[dag_id]) == state, f"{dag_id}: {errors}"
    assert tis["retried"]["flaky"]["try_number"] == 2
    assert tis["branched"]["no"]["state"] == tis["branched"]["after_no"]["state"] == "skipped"
    assert tis["failing"]["never"]["state"] == "upstream_failed"
    assert tis["shrinking"]["gone"]["state"] == tis["dropping"]["gone"]["state"] == "removed"
    for dag_id, run_id in runs.items():
        # "gone" ran no code: removed by the scheduler's check, or by the worker that
        # claimed it when the check came after "first" queued it
        check_run(sluice, receiver, dag_id, run_id, no_user_spans=("gone",))


@pytest.mark.parametrize(
    ("schedulers", "env"),
    [(2, {}), (1, {"SLUICE_SCHEDULE_AFTER_TASK": "false"})],
    ids=["two-schedulers", "schedulers-queue-every-hop"],
)
def test_chain_nests_every_task(
    sluice: Sluice, receiver: OtlpReceiver, schedulers: int, env: dict[str, str]
) -> None:
    export_to(sluice, receiver, **env)
    (sluice.dags_folder / "shapes.py").write_text(textwrap.dedent(SHAPES))
    for _ in range(schedulers):
        sluice.scheduler()
    sluice.worker()
    run_ids = [sluice.trigger("chain5") for _ in range(3)]
    for run_id in run_ids:
        assert sluice.wait_run("chain5", run_id) == "success"
    for run_id in run_ids:
        check_run(sluice, receiver, "chain5", run_id)


THEIRS = """
from datetime import timedelta
from opentelemetry import trace
from sluice import DAG, CeleryTask, Upstream, task

with DAG("theirs", schedule=None) as dag:
    @task
    def extract(context):
        with trace.get_tracer("user.code").start_as_current_span("user extract"):
            return 20

    add = CeleryTask("add", name="their_module.add", args=[Upstream("extract"), 22],
                     celery_queue="their_queue", timeout=timedelta(seconds=30))

    @task
    def report(context):
        with trace.get_tracer("user.code").start_as_current_span("user report"):
            return context["upstream"]["add"] + 1

    extract >> add >> report
"""


def test_their_celery_task_nests_under_its_task_span(
    sluice: Sluice, receiver: OtlpReceiver
) -> None:
    # Given Sluice's worker, and the user's instrumented worker serving their queue only
    # (so the task Sluice sends by name is not one its own worker knows)
    export_to(sluice, receiver, SLUICE_RESULT_BACKEND=sluice.broker_url)
    (sluice.dags_folder / "theirs.py").write_text(textwrap.dedent(THEIRS))
    sluice.scheduler()
    sluice.worker()
    their_worker(sluice, queues=THEIR_QUEUE)
    # When a run calls their task between two Python tasks
    run_id = sluice.trigger("theirs")
    assert sluice.wait_run("theirs", run_id) == "success"
    # Then their task's worker span is a child of the CeleryTask's own span
    wait_until(lambda: run_row(sluice, run_id)["span_status"] == "ended", timeout=30)
    tis = sluice.db_task_states("theirs", run_id)
    trace_id = trace_id_of(sluice, run_id)
    tree = check_run_tree(receiver, trace_id, "theirs", tis, no_user_spans={"add"})
    (theirs,) = wait_until(lambda: Tree(receiver.trace(trace_id)).named("run/their_module.add"))
    assert Tree(receiver.trace(trace_id)).parent(theirs).name == "task add", tree.path(theirs)


def test_standalone_nests_every_task(tmp_path: Path, receiver: OtlpReceiver) -> None:
    """The embedded broker: the scheduler publishes in the process where the worker runs
    (and the Celery instrumentation is installed), outside any span."""
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "shapes.py").write_text(textwrap.dedent(SHAPES))
    database_url = f"sqlite:///{tmp_path / 'standalone.db'}"
    done = standalone(
        tmp_path,
        dags,
        database_url,
        "--trigger",
        "branched",
        "--json",
        OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
        OTEL_BSP_SCHEDULE_DELAY="100",
        OTEL_METRICS_EXPORTER="none",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    tis = printed_states(done.stdout)
    assert tis["no"]["state"] == "skipped" and tis["join"]["state"] == "success"
    engine = create_engine(database_url)
    try:
        with engine.connect() as conn:
            carrier = conn.execute(text("SELECT context_carrier FROM dag_run")).scalar_one()
    finally:
        engine.dispose()
    trace_id = json.loads(carrier)["traceparent"].split("-")[1]
    check_run_tree(receiver, trace_id, "branched", tis)


DAILY = """
from datetime import datetime, timezone
from opentelemetry import trace
from sluice import DAG, task


def work(context):
    with trace.get_tracer("user.code").start_as_current_span(f"user {context['task_id']}"):
        pass


with DAG("daily", schedule="@daily", start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
         catchup=False) as dag:
    @task.branch
    def pick(context):
        work(context)
        return "yes"

    pick >> [task(task_id="yes")(work), task(task_id="no")(work)]
"""


def test_backfill_nests_every_task(sluice: Sluice, receiver: OtlpReceiver) -> None:
    """A backfill publishes every task of its runs itself (workers leave its runs to it)."""
    export_to(sluice, receiver)
    (sluice.dags_folder / "daily.py").write_text(textwrap.dedent(DAILY))
    sluice.worker()
    sluice.ok("backfill", "daily", "--start", "2026-02-01", "--end", "2026-02-02")
    engine = create_engine(sluice.database_url)
    try:
        with engine.connect() as conn:
            run_ids = conn.execute(text("SELECT run_id FROM dag_run")).scalars().all()
    finally:
        engine.dispose()
    assert len(run_ids) == 2
    for run_id in run_ids:
        check_run(sluice, receiver, "daily", run_id)


def test_a_republished_task_nests_under_its_span(sluice: Sluice, receiver: OtlpReceiver) -> None:
    """The queued sweep re-publishes a message the broker lost, with the TI's own span."""
    export_to(sluice, receiver, SLUICE_QUEUED_TIMEOUT="1")
    (sluice.dags_folder / "shapes.py").write_text(textwrap.dedent(SHAPES))
    sluice.scheduler()
    run_id = sluice.trigger("chain5")
    wait_until(lambda: sluice.db_task_states("chain5", run_id)["t0"]["state"] == "queued")
    client = redis.Redis.from_url(sluice.broker_url)
    # the scheduler publishes after its commit: the TI reads queued a moment before
    wait_until(lambda: client.dbsize() > 0, 10)
    client.flushdb()  # the message of t0 is gone
    client.close()
    sluice.worker()
    assert sluice.wait_run("chain5", run_id) == "success"
    check_run(sluice, receiver, "chain5", run_id)


MAPPED = """
import time
from opentelemetry import trace
from sluice import DAG, task


def work(context):
    with trace.get_tracer("user.code").start_as_current_span(f"user {context['task_id']}"):
        time.sleep(0.002)


with DAG("mapped", schedule=None) as dag:
    @task
    def items(context):
        work(context)
        return [1, 2, 3, 4]

    @task(retries=1, retry_delay=0)
    def load(x, context):
        work(context)
        if context["map_index"] == 1 and context["try_number"] == 1:
            raise RuntimeError("index 1 fails once")
        return x

    @task
    def double(y, context):
        work(context)
        return 2 * y

    @task
    def total(values, context):
        work(context)
        return sum(values)

    @task
    def nothing(context):
        work(context)
        return []

    @task
    def never(z, context):
        work(context)

    total(double.expand(y=load.expand(x=items())))
    never.expand(z=nothing())
"""


def test_every_index_of_a_mapped_task_nests_under_its_own_span(
    sluice: Sluice, receiver: OtlpReceiver
) -> None:
    """Each index is a span of its own (`task load[2]`) under the run, its tries' worker
    spans and user spans under it; a retried index's both tries under the same span; a
    mapped task of zero items is one span, `skipped`."""
    export_to(sluice, receiver)
    (sluice.dags_folder / "mapped.py").write_text(textwrap.dedent(MAPPED))
    sluice.scheduler()
    sluice.worker(concurrency=4)
    run_id = sluice.trigger("mapped")
    assert sluice.wait_run("mapped", run_id) == "success"
    tis = sluice.db_task_states("mapped", run_id)
    assert sorted(k for k in tis if k.startswith("load")) == [f"load[{i}]" for i in range(4)]
    assert tis["load[1]"]["try_number"] == 2
    assert tis["never"]["state"] == "skipped"
    check_run(sluice, receiver, "mapped", run_id)
