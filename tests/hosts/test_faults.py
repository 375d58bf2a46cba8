"""Faults on hosts' links (issue 46): each a test, each held to the checker
(`tests.hosts.checker`): every run finishes, each TI has exactly one recorded result, no
two tries of a TI overlap, nothing is left queued or running.

The DAG (`tests.hosts.dag`): `a`, then `b0` and `b1` side by side; each body writes its
start and end on its host. Settings: `tests.procs.Sluice` (heartbeat timeout 5 s).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from tests.engines import engine_for
from tests.hosts.checker import Body, check, read_bodies
from tests.hosts.conftest import hosts_on
from tests.hosts.dag import write_dag
from tests.hosts.hosts import Host, Hosts
from tests.hosts.private_pg import PrivatePostgres
from tests.procs import Sluice, wait_until
from tests.redis_server import REDIS_SERVER, OwnRedis

DAG = "tries"


def trigger(sluice: Sluice, n: int) -> list[str]:
    """`n` runs, made at once (in this process)."""
    return [sluice.trigger(DAG, "--run-id", f"r{i:02d}") for i in range(n)]


def start_workload(
    sluice: Sluice, hosts: Hosts, runs: int, *, sleep: float = 0.3, **dag: Any
) -> tuple[list[str], list[str]]:
    """The DAG written and synced, scheduler `s1` and workers `w1`, `w2` started, `runs`
    runs triggered: the DAG's task ids and the run ids."""
    tasks = write_dag(sluice, hosts.root, sleep=sleep, **dag)
    sluice.run("dags", "list")
    hosts.scheduler("s1")
    hosts.worker("w1")
    hosts.worker("w2")
    return tasks, trigger(sluice, runs)


def finish(sluice: Sluice, hosts: Hosts, runs: list[str], timeout: float = 60) -> None:
    for run_id in runs:
        try:
            sluice.wait_run(DAG, run_id, timeout=timeout)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{hosts.logs()}") from None
    hosts.stop_all()  # a worker's warm shutdown: every body running has written its end


def test_no_fault_each_body_once(sluice: Sluice, hosts: Hosts, tmp_path: Path) -> None:
    """The baseline: hosts through open links, every body once."""
    tasks, runs = start_workload(sluice, hosts, 5)
    finish(sluice, hosts, runs)
    report = check(sluice.database_url, hosts.root, DAG, runs, tasks, bodies_once=True)
    assert report.executions == 15
    assert {b.host for b in report.bodies} == {"w1", "w2"}


def open_bodies(host: Host) -> list[Body]:
    """The bodies running on `host` now (started, not ended)."""
    return [b for b in read_bodies(host.dir.parent) if b.host == host.name and b.end_ns is None]


def ended(hosts: Hosts) -> int:
    return sum(b.end_ns is not None for b in read_bodies(hosts.root))


def query(sluice: Sluice, sql: str, **params: object) -> list[tuple[Any, ...]]:
    with engine_for(sluice.database_url).connect() as conn:  # pooled: polled
        return [tuple(r) for r in conn.execute(text(sql), params).all()]


@pytest.mark.long
@pytest.mark.parametrize("fault", ["cut", "hold"])
def test_worker_cut_off_from_the_broker(sluice: Sluice, hosts: Hosts, fault: str) -> None:
    """A worker's link to Redis lost while it runs tries whose messages it took and has
    not acknowledged: `cut` resets its connections and refuses new ones, `hold` is a
    partition (its connections stay, nothing goes through, its acknowledgements arrive
    late); restored after 8 s. The tries it runs end and are recorded through its
    database link; what it cannot take or publish meanwhile is left to the other worker
    and the queued sweep: each body runs once."""
    sluice.extra_env["SLUICE_QUEUED_TIMEOUT"] = "3"
    tasks, runs = start_workload(sluice, hosts, 20, sleep=1.0)
    cut, kept = hosts["w1"], hosts["w2"]
    in_flight = wait_until(lambda: open_bodies(cut), timeout=30)

    getattr(cut.broker, fault)()
    cut_at = time.time_ns()
    time.sleep(8)
    cut.broker.restore()

    finish(sluice, hosts, runs)
    report = check(sluice.database_url, hosts.root, DAG, runs, tasks, bodies_once=True)
    assert cut.broker.stats.reset >= 1 or fault == "hold"
    assert {b.ti for b in in_flight} <= {b.ti for b in report.bodies if b.host == "w1"}
    assert any(b.host == kept.name and b.start_ns > cut_at for b in report.bodies)


@pytest.mark.long
@pytest.mark.parametrize("fault", ["cut", "hold"])
def test_scheduler_cut_off_from_postgresql_then_back(
    sluice: Sluice, hosts: Hosts, fault: str
) -> None:
    """A scheduler that started runs (and may be mid-pass, their rows locked) loses its
    link to PostgreSQL for twice the heartbeat timeout: `cut` resets its sessions (the
    server ends them and their locks), `hold` is a partition right after one of its
    commits (its sessions stay, holding no lock; a partition inside a transaction is
    `test_scheduler_partitioned_holding_*`). The other scheduler marks it dead and drives
    its runs; back, the old one registers as a new job and queues nothing twice: each
    body runs once."""
    sluice.extra_env["SLUICE_DB_RETRY_MAX_DELAY"] = "1"  # back soon after the link is
    tasks, runs = start_workload(sluice, hosts, 20, sleep=1.0, max_active_runs=4)
    old = hosts["s1"]
    wait_until(lambda: job_of(sluice, old.pid), timeout=30)
    first_job = job_of(sluice, old.pid)
    wait_until(lambda: started_by(sluice, first_job) >= 4, timeout=30)
    other = hosts.scheduler("s2")
    other_job = wait_until(lambda: job_of(sluice, other.pid), timeout=30)
    wait_until(lambda: ended(hosts) >= 3, timeout=30)

    if fault == "cut":
        old.pg.cut()
    else:  # between two of its transactions: inside one, see the tests below
        old.pg.hold_after(b"COMMIT")
        old.pg.wait_held()
    cut_at = now(sluice)
    held = unfinished_started_by(sluice, first_job)
    time.sleep(2 * 5)
    back_at = now(sluice)
    old.pg.restore()
    wait_until(lambda: len(jobs_of(sluice, old.pid)) == 2, timeout=30)

    finish(sluice, hosts, runs)
    check(sluice.database_url, hosts.root, DAG, runs, tasks, bodies_once=True)
    # the other scheduler marked the old one dead and took its runs on
    jobs = jobs_of(sluice, old.pid)
    assert jobs[0] == (first_job, "failed"), jobs
    assert len(jobs) == 2, f"the old scheduler did not come back as a new job: {jobs}"
    queued_meanwhile = query(
        sluice,
        "SELECT count(*) FROM task_instance WHERE queued_by_job_id = :j "
        "AND queued_at BETWEEN :a AND :b",
        j=other_job,
        a=cut_at,
        b=back_at,
    )[0][0]
    assert queued_meanwhile > 0, "the other scheduler queued nothing while the old was away"
    assert held, "the old scheduler held no unfinished run when cut off"
    # the old one queued nothing of its old job after it was marked dead
    late = query(
        sluice,
        "SELECT count(*) FROM task_instance WHERE queued_by_job_id = :j AND queued_at > :b",
        j=first_job,
        b=back_at,
    )[0][0]
    assert late == 0, f"{late} TIs queued by the dead job after it came back"


def jobs_of(sluice: Sluice, pid: int) -> list[tuple[Any, ...]]:
    return query(sluice, "SELECT id, state FROM job WHERE pid = :p ORDER BY id", p=pid)


def job_of(sluice: Sluice, pid: int) -> int | None:
    rows = query(sluice, "SELECT min(id) FROM job WHERE pid = :p", p=pid)
    return rows[0][0]


def started_by(sluice: Sluice, job: int | None) -> int:
    return query(sluice, "SELECT count(*) FROM dag_run WHERE started_by_job_id = :j", j=job)[0][0]


def unfinished_started_by(sluice: Sluice, job: int | None) -> list[str]:
    rows = query(
        sluice,
        "SELECT run_id FROM dag_run WHERE started_by_job_id = :j AND state IN "
        "('queued', 'running')",
        j=job,
    )
    return [r for (r,) in rows]


def now(sluice: Sluice) -> dt.datetime:
    return query(sluice, "SELECT now()")[0][0]


@pytest.mark.long
def test_postgresql_restarted_mid_workload(
    private_sluice: Sluice, private_hosts: Hosts, private_pg: PrivatePostgres
) -> None:
    """PostgreSQL restarted in the middle of 20 runs: a private cluster of the test's own
    (`tests.hosts.private_pg`: initdb and pg_ctl on a free port, about 1.5 s), stopped
    `-m fast` (every session ended), refusing connections for 5 s, started again. A
    body whose result could not be written may run again (at least once), but each TI
    records one success and no two of its tries overlap."""
    sluice, hosts = private_sluice, private_hosts
    tasks, runs = start_workload(sluice, hosts, 20, sleep=0.3)
    wait_until(lambda: ended(hosts) >= 12, timeout=30)

    private_pg.restart(down=5)

    finish(sluice, hosts, runs, timeout=60)
    report = check(sluice.database_url, hosts.root, DAG, runs, tasks, bodies_once=False)
    print(f"{report.executions} bodies for {len(runs) * len(tasks)} TIs")


@pytest.fixture
def own_redis() -> Iterator[OwnRedis]:
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed")
    server = OwnRedis()
    server.start()
    try:
        yield server
    finally:
        server.kill()
        server.stop()


@pytest.fixture
def redis_hosts(sluice: Sluice, own_redis: OwnRedis, tmp_path: Path) -> Iterator[Hosts]:
    """Hosts whose broker is `own_redis` (db 0), which the test may kill and start."""
    sluice.broker_url = own_redis.url(0)
    yield from hosts_on(sluice, tmp_path / "hosts")


@pytest.mark.long
def test_redis_restarted_mid_workload(
    sluice: Sluice, redis_hosts: Hosts, own_redis: OwnRedis
) -> None:
    """Redis (no persistence) killed in the middle of 20 runs, every message lost, and
    started again 3 s later on the same port: the queued sweep publishes again what was
    lost. A body may run again, but each TI records one success, no tries overlap."""
    hosts = redis_hosts
    sluice.extra_env["SLUICE_QUEUED_TIMEOUT"] = "3"
    tasks, runs = start_workload(sluice, hosts, 20, sleep=0.3)
    wait_until(lambda: ended(hosts) >= 12, timeout=30)

    own_redis.kill()
    time.sleep(3)
    own_redis.start()

    finish(sluice, hosts, runs, timeout=60)
    report = check(sluice.database_url, hosts.root, DAG, runs, tasks, bodies_once=False)
    print(f"{report.executions} bodies for {len(runs) * len(tasks)} TIs")


@pytest.mark.long
def test_slow_lossy_links_from_workers_to_postgresql(sluice: Sluice, hosts: Hosts) -> None:
    """Every round trip between the workers and PostgreSQL 100 ms longer, and 5% of the
    chunks each way stalled 200 ms (lost and retransmitted), for a whole workload of 20
    runs: each body runs once."""
    tasks = write_dag(sluice, hosts.root, sleep=0.2)
    sluice.run("dags", "list")
    hosts.scheduler("s1")
    workers = [hosts.worker(name, start=False) for name in ("w1", "w2")]
    for worker in workers:
        worker.pg.delay(100)
        worker.pg.loss(0.05)
        worker.start()
    runs = trigger(sluice, 20)

    finish(sluice, hosts, runs, timeout=60)
    check(sluice.database_url, hosts.root, DAG, runs, tasks, bodies_once=True)
    assert all(w.pg.stats.stalled > 0 for w in workers)


def pool_lock_statements() -> tuple[bytes, ...]:
    """How a queueing pass locks the pool rows on the wire, the first times a connection
    sends it (psycopg prepares a statement on its fifth run; then only its name goes):
    the text of scheduler/core/sql/queueing.sql's `lock_every_pool` and `lock_named_pools`
    up to their first parameter."""
    from sluice.scheduler.core.queries.tis import LOCK_EVERY_POOL, LOCK_NAMED_POOLS

    return tuple(
        s.named.pyformat.split("%(")[0].encode() for s in (LOCK_EVERY_POOL, LOCK_NAMED_POOLS)
    )


@pytest.mark.long
def test_scheduler_partitioned_holding_the_pool_lock(sluice: Sluice, hosts: Hosts) -> None:
    """A scheduler partitioned from PostgreSQL right after it locked the pool rows in a
    queueing pass (`hold_after` the statement: the server ran it, the answer never came
    back): its session stays `idle in transaction` with the locks, as a real partition
    leaves it until the server's TCP keepalive gives up (two hours by default), unless
    PostgreSQL ends it first: Sluice sets `idle_in_transaction_session_timeout` on its
    sessions (SLUICE_DB_IDLE_IN_TX_TIMEOUT, half the heartbeat timeout), so bodies go on
    ending while it is partitioned (without it, none did for the whole partition)."""
    sluice.extra_env["SLUICE_DB_RETRY_MAX_DELAY"] = "1"
    # bodies of 1.5 s, so that work is left for the whole partition (with 0.5 s, one run
    # saw no body end in the window counted below)
    tasks, runs = start_workload(sluice, hosts, 20, sleep=1.5)
    wait_until(lambda: ended(hosts) >= 3, timeout=30)

    stuck = hosts.scheduler("s2", start=False)  # its first pass's pool lock: held
    stuck.pg.hold_after(*pool_lock_statements())
    stuck.start()
    stuck.pg.wait_held()
    time.sleep(1.5)
    idle = query(
        sluice,
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND state = 'idle in transaction' AND state_change < now() - interval '1 second'",
    )[0][0]
    assert idle >= 1, "the partitioned scheduler holds no transaction open"
    held_at = time.time_ns()
    time.sleep(3 * 5)  # three heartbeat timeouts
    during = [
        b
        for b in read_bodies(hosts.root)
        if b.end_ns is not None and b.end_ns > held_at + 5 * 10**9
    ]
    stuck.pg.restore()

    finish(sluice, hosts, runs)
    check(sluice.database_url, hosts.root, DAG, runs, tasks, bodies_once=True)
    assert during, "no body ended while one scheduler was partitioned holding the pool lock"


RUN_CLAIM = b"FOR NO KEY UPDATE OF dag_run SKIP LOCKED"
"""How a scheduling pass claims runs on the wire (`queries.runs.claim_runs_to_examine`),
the first times a connection sends it."""


@pytest.mark.long
@pytest.mark.parametrize("idle_limit", ["default", "off"])
def test_scheduler_partitioned_holding_claimed_runs(
    sluice: Sluice, hosts: Hosts, idle_limit: str
) -> None:
    """A scheduler partitioned right after it claimed every running run (their rows
    locked FOR NO KEY UPDATE, its session `idle in transaction`), for three heartbeat
    timeouts, while another scheduler sweeps: the workers' results of those runs wait on
    the run locks. Each body must still run once: a finished try waiting for its result's
    lock is not a lost try. With the default SLUICE_DB_IDLE_IN_TX_TIMEOUT PostgreSQL ends
    the partitioned session; with it off (`0`, on that scheduler) the locks stay for the
    whole partition, and the tries hold on because their worker beats for them until
    their result is written (it stopped at the body's end: the sweep retried them).

    The first scheduler stops before the partitioned one starts, so that the latter's
    first pass claims every running run (none is skipped as locked); a third starts once
    it is held."""
    tasks, runs = start_workload(sluice, hosts, 20, sleep=0.5)
    first = hosts["s1"]
    wait_until(lambda: ended(hosts) >= 3, timeout=30)
    first.stop()

    stuck = hosts.scheduler("s2", start=False)  # its first pass's claim: held
    if idle_limit == "off":
        stuck.env["SLUICE_DB_IDLE_IN_TX_TIMEOUT"] = "0"
    stuck.pg.hold_after(RUN_CLAIM)
    stuck.start()
    stuck.pg.wait_held()
    hosts.scheduler("s3")
    time.sleep(3 * 5)
    stuck.pg.restore()

    finish(sluice, hosts, runs)
    check(sluice.database_url, hosts.root, DAG, runs, tasks, bodies_once=True)


@pytest.mark.long
def test_scheduler_partitioned_in_its_heartbeat_is_found_dead(sluice: Sluice, hosts: Hosts) -> None:
    """A scheduler partitioned right after it sent its heartbeat's UPDATE (its job row
    locked, the commit never sent): the other scheduler should find it dead within a few
    heartbeat timeouts, as it finds a scheduler cut off between two transactions."""
    tasks, runs = start_workload(sluice, hosts, 10, sleep=0.5)
    stuck = hosts.scheduler("s2", start=False)
    stuck.pg.hold_after(b"UPDATE job SET latest_heartbeat")
    stuck.start()
    stuck.pg.wait_held()
    job = wait_until(lambda: job_of(sluice, stuck.pid), timeout=10)
    try:
        wait_until(lambda: jobs_of(sluice, stuck.pid)[0][1] == "failed", timeout=3 * 5)
    finally:
        stuck.pg.restore()
        finish(sluice, hosts, runs)
    check(sluice.database_url, hosts.root, DAG, runs, tasks, bodies_once=True)
    assert job is not None
