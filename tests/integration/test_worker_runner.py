"""The worker side against real PostgreSQL and Redis: `run_task_instance` called directly,
then a real `celery worker` subprocess fed by `publish()`, and the Redis wake-ups."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy import Engine, select, text, update
from sqlalchemy.orm import Session, sessionmaker

from sluice.broker.app import create_app
from sluice.broker.publisher import publish
from sluice.broker.wakeup import LocalWaker, RedisWaker, waker_for
from sluice.broker.worker.heartbeat import beat_tries
from sluice.broker.worker.runner import Outcome, WorkerContext, run_task_instance
from sluice.scheduler.core.db import make_engine, make_session_factory, transaction, utcnow
from sluice.scheduler.core.messages import MessageError, RunMessage
from sluice.scheduler.core.models import Dag, DagRun, TaskInstance
from sluice.scheduler.core.settings import Settings
from sluice.scheduler.core.states import TI, RunType
from sluice.scheduler.core.transitions import move_ti, move_tis
from sluice.tasks.loader import DagCache
from tests.conftest import close_celery_app, migrated_database
from tests.redis_server import session_redis


def _redis(db: int = 11) -> str:
    """A db of the tests' own Redis (this process's: `tests.redis_server`)."""
    return session_redis().url(db)


REPO = Path(__file__).resolve().parents[2]
DAG_ID = "worker_test"

DAG_FILE = """
from pathlib import Path

from sluice import DAG, Skip, Task

HERE = Path(__file__).parent


def mark(context):
    with open(HERE / f"{context['run_id']}.{context['task_id']}.log", "a") as f:
        f.write(context["attempt_id"] + "\\n")


def ok(context):
    mark(context)
    return {"n": 1, "try": context["try_number"], "date": context["logical_date"]}


def boom(context):
    mark(context)
    raise ValueError("boom\\nsecond line")


def skipper(context):
    raise Skip("nothing to do")


def bad_result(context):
    return object()


def down(context):
    return {"upstream": context["upstream"], "conf": context["conf"]}


def shutdown(context):
    raise SystemExit(1)


def slow(context):
    import time
    time.sleep(0.8)
    return "slept"


with DAG("worker_test") as dag:
    t_ok = Task("ok", python_callable=ok)
    Task("boom", python_callable=boom)
    Task("skipper", python_callable=skipper)
    Task("bad_result", python_callable=bad_result)
    Task("slow", python_callable=slow)
    Task("shutdown", python_callable=shutdown)
    t_ok >> Task("down", python_callable=down)
"""

UPSTREAM = {"down": ["ok"]}


def _require(what: str, check: Callable[[], object]) -> None:
    try:
        check()
    except Exception as exc:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(f"{what} not available: {exc}")


def task_spec(task_id: str, retries: int = 0, retry_delay: float = 60.0) -> dict[str, Any]:
    """One task's serialized form, as `tasks.serialize` writes it (by hand on purpose)."""
    upstream = UPSTREAM.get(task_id, [])
    downstream = sorted(t for t, ups in UPSTREAM.items() if task_id in ups)
    return {
        "task_id": task_id,
        "kind": "python",
        "upstream": upstream,
        "downstream": downstream,
        "trigger_rule": "all_success",
        "retries": retries,
        "retry_delay": retry_delay,
        "retry_exponential_backoff": False,
        "max_retry_delay": None,
        "execution_timeout": None,
        "queue": "default",
        "pool": None,
        "pool_slots": 1,
        "priority_weight": 1,
        "is_branch": False,
    }


TASK_IDS = ["ok", "boom", "skipper", "bad_result", "slow", "down", "shutdown"]
RETRIES = {"boom": 1}


@pytest.fixture(scope="module")
def engine(pg_admin: Engine) -> Iterator[Engine]:
    for url in migrated_database(pg_admin):
        eng = make_engine(url)
        try:
            yield eng
        finally:
            eng.dispose()


@pytest.fixture(scope="module")
def factory(engine: Engine) -> sessionmaker[Session]:
    return make_session_factory(engine)


@pytest.fixture(scope="module")
def dag_file(engine: Engine, factory: sessionmaker[Session], tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("dags")
    path = folder / "worker_test_dag.py"
    path.write_text(DAG_FILE)
    serialized = {
        "dag_id": DAG_ID,
        "fileloc": str(path),
        "tasks": {t: task_spec(t, retries=RETRIES.get(t, 0)) for t in TASK_IDS},
    }
    with transaction(factory) as session:
        session.add(Dag(dag_id=DAG_ID, fileloc=str(path), version_hash="v1", serialized=serialized))
    return path


_dates = itertools.count()


def make_run(
    factory: sessionmaker[Session], conf: dict[str, Any] | None = None
) -> tuple[str, dict[str, int]]:
    """A running DagRun with one TI (state none) per task; returns its run_id and TI ids."""
    logical_date = dt.datetime(2024, 1, 1, tzinfo=dt.UTC) + dt.timedelta(days=next(_dates))
    run_id = f"manual__{uuid.uuid4().hex[:10]}"
    with transaction(factory) as session:
        run = DagRun(
            dag_id=DAG_ID,
            run_id=run_id,
            logical_date=logical_date,
            run_type=RunType.MANUAL,
            conf=conf or {},
            dag_hash="v1",
        )
        session.add(run)
        session.flush()
        tis = {
            t: TaskInstance(
                dag_run_id=run.id,
                dag_id=DAG_ID,
                run_id=run_id,
                task_id=t,
                max_tries=RETRIES.get(t, 0) + 1,
            )
            for t in TASK_IDS
        }
        session.add_all(tis.values())
        session.flush()
        return run_id, {t: ti.id for t, ti in tis.items()}


def queue_ti(
    factory: sessionmaker[Session], ti_id: int, run_id: str, task_id: str, try_number: int = 1
) -> RunMessage:
    """none/up_for_retry -> scheduled -> queued with a fresh attempt_id, as a scheduler would."""
    attempt_id = str(uuid.uuid4())
    with transaction(factory) as session:
        now = utcnow()
        assert move_ti(session, ti_id, TI.SCHEDULED, expect=[TI.NONE, TI.UP_FOR_RETRY], now=now)
        assert move_ti(
            session,
            ti_id,
            TI.QUEUED,
            expect=[TI.SCHEDULED],
            now=now,
            values={"attempt_id": attempt_id, "try_number": try_number},
        )
    return RunMessage(
        ti_id=ti_id,
        attempt_id=attempt_id,
        dag_id=DAG_ID,
        run_id=run_id,
        task_id=task_id,
        try_number=try_number,
        queue="default",
    )


def load_ti(factory: sessionmaker[Session], ti_id: int) -> TaskInstance:
    with transaction(factory) as session:
        return session.scalars(select(TaskInstance).where(TaskInstance.id == ti_id)).one()


def runs_of(dag_file: Path, run_id: str, task_id: str) -> int:
    log = dag_file.parent / f"{run_id}.{task_id}.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


@pytest.fixture()
def ctx(engine: Engine, factory: sessionmaker[Session], dag_file: Path) -> WorkerContext:
    settings = Settings(
        database_url=engine.url.render_as_string(hide_password=False),
        heartbeat_interval=0.2,
        dag_refresh_interval=0.5,
        parse_timeout=1.0,
    )
    return WorkerContext(
        session_factory=factory,
        dags=DagCache(),
        waker=LocalWaker(),
        settings=settings,
        hostname="test-host",
        pid=os.getpid(),
    )


# --- run_task_instance, no Celery ---------------------------------------------------------


def test_success_stores_result_and_wakes(ctx: WorkerContext, factory, dag_file) -> None:
    run_id, ids = make_run(factory)
    msg = queue_ti(factory, ids["ok"], run_id, "ok")

    assert run_task_instance(ctx, msg) is Outcome.SUCCESS

    ti = load_ti(factory, ids["ok"])
    assert ti.state == TI.SUCCESS
    assert ti.result is not None
    assert json.loads(ti.result) == {"n": 1, "try": 1, "date": logical_date(factory, run_id)}
    assert (ti.hostname, ti.pid) == ("test-host", os.getpid())
    assert ti.start_date is not None and ti.end_date is not None
    assert ctx.waker.wait(0)


def test_a_moved_dag_file_is_run_from_its_new_path(
    ctx: WorkerContext, factory, dag_file: Path
) -> None:
    """Moving a file keeps its DAG's version hash: a worker that cached the DAG row must
    still follow the new `fileloc` (the old file is gone)."""
    run_id, ids = make_run(factory)
    assert run_task_instance(ctx, queue_ti(factory, ids["ok"], run_id, "ok")) is Outcome.SUCCESS
    moved = dag_file.parent / "sub" / dag_file.name
    moved.parent.mkdir(exist_ok=True)
    dag_file.rename(moved)
    try:
        with transaction(factory) as session:  # what the scheduler's folder sync writes
            session.execute(update(Dag).where(Dag.dag_id == DAG_ID).values(fileloc=str(moved)))
        run_id, ids = make_run(factory)
        msg = queue_ti(factory, ids["ok"], run_id, "ok")
        assert run_task_instance(ctx, msg) is Outcome.SUCCESS
    finally:
        moved.rename(dag_file)
        with transaction(factory) as session:
            session.execute(update(Dag).where(Dag.dag_id == DAG_ID).values(fileloc=str(dag_file)))


def logical_date(factory: sessionmaker[Session], run_id: str) -> str:
    with transaction(factory) as session:
        run = session.scalars(select(DagRun).where(DagRun.run_id == run_id)).one()
        return run.logical_date.isoformat()


def test_duplicate_message_runs_the_task_once(ctx: WorkerContext, factory, dag_file) -> None:
    run_id, ids = make_run(factory)
    msg = queue_ti(factory, ids["ok"], run_id, "ok")

    assert run_task_instance(ctx, msg) is Outcome.SUCCESS
    assert run_task_instance(ctx, msg) is Outcome.STALE

    assert runs_of(dag_file, run_id, "ok") == 1
    assert load_ti(factory, ids["ok"]).state == TI.SUCCESS


def test_wrong_attempt_id_is_stale(ctx: WorkerContext, factory, dag_file) -> None:
    run_id, ids = make_run(factory)
    msg = queue_ti(factory, ids["ok"], run_id, "ok")
    old = RunMessage.from_kwargs({**msg.to_kwargs(), "attempt_id": str(uuid.uuid4())})

    assert run_task_instance(ctx, old) is Outcome.STALE

    ti = load_ti(factory, ids["ok"])
    assert (ti.state, ti.attempt_id, ti.hostname) == (TI.QUEUED, msg.attempt_id, None)
    assert runs_of(dag_file, run_id, "ok") == 0
    assert not ctx.waker.wait(0)


def test_failure_with_retries_left_is_up_for_retry(ctx: WorkerContext, factory, dag_file):
    run_id, ids = make_run(factory)
    msg = queue_ti(factory, ids["boom"], run_id, "boom")
    before = utcnow()

    assert run_task_instance(ctx, msg) is Outcome.UP_FOR_RETRY

    ti = load_ti(factory, ids["boom"])
    assert (ti.state, ti.try_number, ti.max_tries) == (TI.UP_FOR_RETRY, 1, 2)
    assert ti.error == "ValueError: boom second line"
    assert ti.next_retry_at is not None
    assert before + dt.timedelta(seconds=59) < ti.next_retry_at < utcnow() + dt.timedelta(61)

    # When the second (last) try fails too, the TI is failed.
    msg2 = queue_ti(factory, ids["boom"], run_id, "boom", try_number=2)
    assert run_task_instance(ctx, msg2) is Outcome.FAILED
    ti = load_ti(factory, ids["boom"])
    assert (ti.state, ti.try_number, ti.next_retry_at) == (TI.FAILED, 2, None)
    assert runs_of(dag_file, run_id, "boom") == 2


def test_failure_without_retries_is_failed(ctx: WorkerContext, factory, dag_file) -> None:
    run_id, ids = make_run(factory)
    with transaction(factory) as session:  # this TI has no retries
        session.get(TaskInstance, ids["boom"]).max_tries = 1  # type: ignore[union-attr]
    msg = queue_ti(factory, ids["boom"], run_id, "boom")

    assert run_task_instance(ctx, msg) is Outcome.FAILED

    ti = load_ti(factory, ids["boom"])
    assert (ti.state, ti.error, ti.next_retry_at) == (
        TI.FAILED,
        "ValueError: boom second line",
        None,
    )


def test_skip(ctx: WorkerContext, factory, dag_file) -> None:
    run_id, ids = make_run(factory)
    msg = queue_ti(factory, ids["skipper"], run_id, "skipper")

    assert run_task_instance(ctx, msg) is Outcome.SKIPPED
    assert load_ti(factory, ids["skipper"]).state == TI.SKIPPED


def test_non_json_result_fails_clearly(ctx: WorkerContext, factory, dag_file) -> None:
    run_id, ids = make_run(factory)
    msg = queue_ti(factory, ids["bad_result"], run_id, "bad_result")

    assert run_task_instance(ctx, msg) is Outcome.FAILED

    ti = load_ti(factory, ids["bad_result"])
    assert ti.state == TI.FAILED and ti.result is None
    assert ti.error is not None
    assert ti.error.startswith("ResultError: return value of task 'bad_result' is not JSON")


def test_upstream_results_and_conf_in_context(ctx: WorkerContext, factory, dag_file) -> None:
    run_id, ids = make_run(factory, conf={"x": 42})
    assert run_task_instance(ctx, queue_ti(factory, ids["ok"], run_id, "ok")) is Outcome.SUCCESS

    assert run_task_instance(ctx, queue_ti(factory, ids["down"], run_id, "down")) == "success"

    result = load_ti(factory, ids["down"]).result
    assert result is not None
    assert json.loads(result) == {
        "upstream": {"ok": {"n": 1, "try": 1, "date": logical_date(factory, run_id)}},
        "conf": {"x": 42},
    }


def test_heartbeat_while_running(ctx: WorkerContext, factory, dag_file) -> None:
    run_id, ids = make_run(factory)
    msg = queue_ti(factory, ids["slow"], run_id, "slow")

    assert run_task_instance(ctx, msg) is Outcome.SUCCESS

    ti = load_ti(factory, ids["slow"])
    assert ti.start_date is not None and ti.last_heartbeat_at is not None
    assert ti.last_heartbeat_at - ti.start_date >= dt.timedelta(seconds=0.4)


def test_result_of_a_cleared_ti_is_dropped(ctx: WorkerContext, factory, dag_file) -> None:
    run_id, ids = make_run(factory)
    msg = queue_ti(factory, ids["slow"], run_id, "slow")

    def clear_while_running() -> None:
        wait_until(lambda: load_ti(factory, ids["slow"]).state == TI.RUNNING, 5, "running")
        with transaction(factory) as session:
            assert move_ti(session, ids["slow"], TI.NONE, expect=[TI.RUNNING], now=utcnow())

    clearer = threading.Thread(target=clear_while_running)
    clearer.start()
    assert run_task_instance(ctx, msg) is Outcome.STALE
    clearer.join()
    ti = load_ti(factory, ids["slow"])
    assert ti.state == TI.NONE and ti.result is None


def _rename_ti(factory: sessionmaker[Session], ti_id: int, task_id: str) -> None:
    with transaction(factory) as session:
        session.execute(
            text("UPDATE task_instance SET task_id=:t WHERE id=:id"), {"t": task_id, "id": ti_id}
        )


def _store_version(factory: sessionmaker[Session], version: str, tasks: list[str]) -> None:
    with transaction(factory) as session:
        dag = session.get(Dag, DAG_ID)
        assert dag is not None
        specs = {t: task_spec(t, retries=RETRIES.get(t, 0)) for t in tasks}
        dag.serialized = {**dag.serialized, "tasks": specs}
        dag.version_hash = version


def test_task_gone_from_the_stored_dag_is_removed(ctx: WorkerContext, factory, dag_file) -> None:
    # a TI of a task that neither the file nor the DAG's stored version has (queued from
    # the run's rows before a scheduler checked the run against the new version)
    run_id, ids = make_run(factory)
    _rename_ti(factory, ids["skipper"], "gone")
    msg = queue_ti(factory, ids["skipper"], run_id, "gone")

    assert run_task_instance(ctx, msg) is Outcome.REMOVED
    ti = load_ti(factory, ids["skipper"])
    assert (ti.state, ti.error, ti.end_date is not None) == (TI.REMOVED, None, True)


def test_task_missing_from_the_file_waits_for_the_sync_that_drops_it(
    ctx: WorkerContext, factory, dag_file
) -> None:
    # the stored version has "gone", the worker's file does not: the file changed after
    # the last sync, and a scheduler queued "gone" from the version before. The sync that
    # stores the file's version comes while the worker waits for it: "gone" is removed
    run_id, ids = make_run(factory)
    _rename_ti(factory, ids["skipper"], "gone")
    msg = queue_ti(factory, ids["skipper"], run_id, "gone")
    _store_version(factory, "v1-with-gone", [*TASK_IDS, "gone"])
    sync = threading.Timer(0.5, _store_version, (factory, "v1", TASK_IDS))
    sync.start()
    try:
        assert run_task_instance(ctx, msg) is Outcome.REMOVED
    finally:
        sync.join()
    ti = load_ti(factory, ids["skipper"])
    assert (ti.state, ti.error) == (TI.REMOVED, None)


def test_task_missing_from_the_file_only_is_a_task_failure(
    ctx: WorkerContext, factory, dag_file
) -> None:
    # the stored version has "gone", the worker's file does not, and no sync changes
    # that within a refresh interval and a parse (another folder): the try fails, saying
    # where the task was looked for
    run_id, ids = make_run(factory)
    _rename_ti(factory, ids["skipper"], "gone")
    msg = queue_ti(factory, ids["skipper"], run_id, "gone")
    _store_version(factory, "v1-with-gone", [*TASK_IDS, "gone"])
    try:
        assert run_task_instance(ctx, msg) is Outcome.FAILED
    finally:
        _store_version(factory, "v1", TASK_IDS)
    error = load_ti(factory, ids["skipper"]).error
    assert error == (
        f"LookupError: task 'gone' is not in DAG 'worker_test' of {dag_file}; the DAG's "
        "stored version has it (the file changed after the last sync of the DAGs folder, "
        "or this worker reads another folder)"
    )


def test_worker_shutdown_is_not_a_task_failure(ctx: WorkerContext, factory, dag_file) -> None:
    run_id, ids = make_run(factory)
    msg = queue_ti(factory, ids["shutdown"], run_id, "shutdown")

    with pytest.raises(SystemExit):
        run_task_instance(ctx, msg)

    ti = load_ti(factory, ids["shutdown"])
    assert (ti.state, ti.error) == (TI.RUNNING, None)  # left for the heartbeat sweep


def test_malformed_message_is_rejected() -> None:
    good = RunMessage(1, "a", "d", "r", "t", 1, "default").to_kwargs()
    assert RunMessage.from_kwargs(good).to_kwargs() == good
    for bad in ({**good, "ti_id": "1"}, {**good, "try_number": True}, {"ti_id": 1}):
        with pytest.raises(MessageError):
            RunMessage.from_kwargs(bad)


# --- a real Celery worker and Redis ----------------------------------------------------------


@pytest.fixture()
def redis_ns() -> Iterator[str]:
    _require("Redis", lambda: redis.Redis.from_url(_redis()).ping())
    namespace = f"sluicetest{uuid.uuid4().hex[:8]}"
    yield namespace
    client = redis.Redis.from_url(_redis())
    for key in client.scan_iter(f"*{namespace}*"):
        client.delete(key)
    client.close()


def start_worker(engine: Engine, namespace: str) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "SLUICE_DATABASE_URL": engine.url.render_as_string(hide_password=False),
        "SLUICE_BROKER_URL": _redis(),
        "SLUICE_NAMESPACE": namespace,
    }
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "sluice.broker.worker.app",
            "worker",
            "-Q",
            f"{namespace}.default",
            "--pool",
            "prefork",
            "-c",
            "2",
            "-l",
            "INFO",
            "--without-mingle",
            "--without-gossip",
            "--without-heartbeat",
            "-n",
            f"{namespace}@%h",
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def stop_worker(proc: subprocess.Popen[bytes]) -> str:
    proc.send_signal(signal.SIGTERM)  # the main pid only: a warm shutdown
    try:
        out, _ = proc.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    return out.decode(errors="replace")


def test_celery_worker_runs_published_messages(engine, factory, dag_file, redis_ns) -> None:
    # Given the last unfinished TI of a run queued, a subscribed waker and a worker
    run_id, ids = make_run(factory)
    with transaction(factory) as session:
        others = [ti_id for task_id, ti_id in ids.items() if task_id != "ok"]
        move_tis(session, others, TI.REMOVED, expect=[TI.NONE], now=utcnow())
    msg = queue_ti(factory, ids["ok"], run_id, "ok")
    settings = Settings(database_url="unused://", broker_url=_redis(), namespace=redis_ns)
    waker = waker_for(settings)
    assert isinstance(waker, RedisWaker)
    assert not waker.wait(0.01)  # subscribes
    app = create_app(settings)
    proc = start_worker(engine, redis_ns)
    output = ""
    try:
        # When the message is published twice (a redelivery) in one batch
        publish(app, [msg, msg])

        # Then the task runs once, succeeds, and the worker wakes the schedulers to end the run
        wait_until(lambda: load_ti(factory, ids["ok"]).state == TI.SUCCESS, 20, "success")
        ti = load_ti(factory, ids["ok"])
        assert ti.result is not None and ti.pid != os.getpid()
        deadline = time.monotonic() + 5
        while not waker.wait(0.2):
            assert time.monotonic() < deadline, "no wake-up from the worker"
        # both deliveries acknowledged before the warm shutdown: a job that ends after the
        # pool stopped reading its results keeps its process for billiard's 30 s wait
        wait_until(lambda: _delivered(redis_ns, msg.attempt_id), 20, "both deliveries acked")
        assert runs_of(dag_file, run_id, "ok") == 1
    finally:
        output = stop_worker(proc)
        waker.close()
        close_celery_app(app)
    assert proc.returncode == 0, output
    assert f".ok (ti {ids['ok']}, attempt {msg.attempt_id}) -> success" in output, output
    stale = f"stale message for worker_test.{run_id}.ok (ti {ids['ok']}, attempt {msg.attempt_id})"
    assert output.count(stale) == 1, output


def _delivered(namespace: str, attempt_id: str) -> bool:
    """No message of `namespace` waits in its queue, and none of `attempt_id` is unacked."""
    client = redis.Redis.from_url(_redis())
    try:
        waiting = client.llen(f"{namespace}.default")
        unacked = [v for v in client.hvals("unacked") if attempt_id.encode() in v]
    finally:
        client.close()
    return waiting == 0 and not unacked


# --- wake-ups over Redis ------------------------------------------------------------------


def test_redis_waker_wakes_another_thread(redis_ns: str) -> None:
    waiter = RedisWaker(_redis(), redis_ns)
    other_db = RedisWaker(_redis(12), redis_ns)
    waker = RedisWaker(_redis(), redis_ns)
    try:
        assert waiter.channel == f"{redis_ns}:11:wakeup"
        assert not waiter.wait(0.01)  # subscribes
        woken: list[bool] = []
        thread = threading.Thread(target=lambda: woken.append(waiter.wait(5)))
        thread.start()
        time.sleep(0.1)
        other_db.wake()  # another deployment on the same Redis: not for us
        waker.wake()
        thread.join(6)
        assert woken == [True]

        # A burst of wake-ups is drained by one wait.
        for _ in range(5):
            waker.wake()
        time.sleep(0.05)
        assert waiter.wait(1)
        assert not waiter.wait(0.05)
    finally:
        for w in (waiter, other_db, waker):
            w.close()


def test_shared_news_go_to_one_scheduler_broadcast_news_to_all(redis_ns: str) -> None:
    first, second = RedisWaker(_redis(), redis_ns), RedisWaker(_redis(), redis_ns)
    waker = RedisWaker(_redis(), redis_ns)
    try:
        for w in (first, second):
            assert not w.wait(0.01)  # subscribes
            assert w.take_news() is None  # a new scheduler looks at everything once
        waker.wake(5, shared=True)
        waker.wake(6, shared=True)
        waker.wake(7)  # a run claimed by a backfill: every listener hears it
        assert first.wait(2) and second.wait(2)
        assert first.take_news() == {5, 6, 7}
        assert second.take_news() == {7}  # 5 and 6 were taken by the first
        assert first.take_news() == set()
        # With one scheduler gone, the other takes all the shared news.
        first.close()
        waker.wake(8, shared=True)
        assert second.wait(2) and second.take_news() == {8}
    finally:
        for w in (first, second, waker):
            w.close()


def test_shared_news_are_popped_one_batch_at_a_time(redis_ns: str) -> None:
    """A scheduler takes at most one batch of shared news; while more are left its wait
    returns at once, and what one scheduler shares back another takes."""
    first = RedisWaker(_redis(), redis_ns, batch=2)
    second = RedisWaker(_redis(), redis_ns, batch=2)
    try:
        for w in (first, second):
            assert not w.wait(0.01)  # subscribes
            assert w.take_news() is None
        first.share({1, 2, 3, 4, 5})
        assert first.wait(2) and second.wait(2)
        taken = [first.take_news(), second.take_news()]
        assert all(t is not None and len(t) == 2 for t in taken)
        started = time.monotonic()
        assert first.wait(5)  # one run is left: no waiting for a wake-up
        assert time.monotonic() - started < 1
        last = first.take_news()
        assert last is not None and len(last) == 1
        everything = set().union(*(t or set() for t in taken), last)
        assert everything == {1, 2, 3, 4, 5}  # each run taken once
        assert second.take_news() == set()
    finally:
        for w in (first, second):
            w.close()


def test_redis_waker_survives_lost_connection_and_dead_server(redis_ns: str) -> None:
    waiter = RedisWaker(_redis(), redis_ns)
    waker = RedisWaker(_redis(), redis_ns)
    dead = RedisWaker("redis://127.0.0.1:1/11", redis_ns)
    admin = redis.Redis.from_url(_redis())
    try:
        assert not waiter.wait(0.01)
        # The subscriber's connection is killed (as by a Redis restart).
        for client in admin.client_list():
            if client["name"] == f"{redis_ns}-waker" and int(client["sub"]) > 0:
                admin.client_kill_filter(_id=client["id"])
        started = time.monotonic()
        assert not waiter.wait(0.3)
        assert time.monotonic() - started >= 0.25
        assert not waiter.wait(0.05)  # subscribes again
        waker.wake()
        assert waiter.wait(2)
        # A server that is down: wake() does not raise, wait() sleeps its timeout.
        dead.wake()
        started = time.monotonic()
        assert not dead.wait(0.2)
        assert time.monotonic() - started >= 0.15
    finally:
        for w in (waiter, waker, dead):
            w.close()
        admin.close()


def test_a_beat_never_waits_on_a_locked_try(engine: Engine, factory) -> None:
    """A try's row locked by another transaction (its own result waiting on its run's
    lock, a sweep) is counted running without being waited on; once the lock is gone the
    beat writes it again; a try no longer running is not counted."""
    run_id, ids = make_run(factory)
    running = queue_ti(factory, ids["ok"], run_id, "ok")
    gone = queue_ti(factory, ids["boom"], run_id, "boom")
    with transaction(factory) as session:
        for msg in (running, gone):
            assert move_ti(session, msg.ti_id, TI.RUNNING, expect=[TI.QUEUED], now=utcnow())
        assert move_ti(session, gone.ti_id, TI.FAILED, expect=[TI.RUNNING], now=utcnow())
    tries = [(running.ti_id, running.attempt_id), (gone.ti_id, gone.attempt_id)]
    beaten: list[set[int]] = []
    with engine.connect() as holder:
        holder.exec_driver_sql(
            f"SELECT id FROM task_instance WHERE id = {running.ti_id} FOR UPDATE"
        ).all()
        before = load_ti(factory, running.ti_id).last_heartbeat_at

        def beat() -> None:
            with transaction(factory) as session:
                beaten.append(beat_tries(session, tries, utcnow()))

        beating = threading.Thread(target=beat, daemon=True)
        beating.start()
        beating.join(timeout=5)
        assert not beating.is_alive(), "the beat waited on the row lock"
        assert beaten == [{running.ti_id}]
        holder.rollback()
    assert load_ti(factory, running.ti_id).last_heartbeat_at == before  # skipped, not written
    with transaction(factory) as session:
        assert beat_tries(session, tries, utcnow()) == {running.ti_id}
    assert load_ti(factory, running.ti_id).last_heartbeat_at != before
