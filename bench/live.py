"""A live Sluice deployment for the bench: its database, `sluice scheduler`, `sluice worker`
and, for W13, `sluice triggerer`.

Runs are triggered in-process (one transaction for a batch, then a wake-up, as
`sluice dags trigger` does), and waited for by polling the run rows with
read-only transactions that are rolled back, so that polling adds nothing to
the database's commit counter (W6).
"""

from __future__ import annotations

import datetime as dt
import http.client
import socket
import time
from collections.abc import Sequence
from pathlib import Path

import redis
from sqlalchemy import Engine, create_engine, func, select, text
from sqlalchemy.orm import Session, sessionmaker

from bench.pg import BenchDb
from bench.procs import BenchError, Proc, clean_env, run_cli, sluice_argv, wait_until
from sluice.broker.wakeup import Waker, waker_for, wakeup_channel, wakeup_url
from sluice.scheduler.core.db import make_session_factory, transaction, utcnow
from sluice.scheduler.core.models import Dag, DagRun, Job
from sluice.scheduler.core.settings import Settings
from sluice.scheduler.core.states import DagRunState, JobState, RunType
from sluice.scheduler.scheduling.dagbag import sync_dag_folder
from sluice.scheduler.scheduling.dagrun import create_dagrun


class LiveEnv:
    """One PostgreSQL database, a DAGs folder, and the scheduler, worker and triggerer
    processes."""

    def __init__(
        self,
        db: BenchDb,
        broker_url: str,
        namespace: str,
        dags_folder: Path,
        log_dir: Path,
        loop_interval: float,
    ) -> None:
        self.db = db
        self.broker_url = broker_url
        self.namespace = namespace
        self.dags_folder = dags_folder
        self.log_dir = log_dir
        self.loop_interval = loop_interval
        self.extra_env: dict[str, str] = {}
        """More settings for every process (e.g. SLUICE_SCHEDULE_AFTER_TASK)."""
        self.worker_env: dict[str, str] = {}
        """Settings for the workers only, over `env_vars` (e.g. a SLUICE_DATABASE_URL through
        a delaying proxy: `bench.latency`)."""
        self.schedulers: list[Proc] = []
        self.workers: list[Proc] = []
        self.triggerers: list[Proc] = []
        self.api: Proc | None = None
        """A `sluice api` process (`start_api`), at `api_port`, writes allowed with `api_token`."""
        self.api_port = 0
        self.api_token = ""
        self._engine: Engine | None = None
        self._factory: sessionmaker[Session] | None = None
        self._waker: Waker | None = None
        self._workers_started = 0

    # -- setup -----------------------------------------------------------------------------
    @property
    def env_vars(self) -> dict[str, str]:
        return {
            "SLUICE_DATABASE_URL": self.db.url,
            "SLUICE_BROKER_URL": self.broker_url,
            "SLUICE_DAGS_FOLDER": str(self.dags_folder),
            "SLUICE_NAMESPACE": self.namespace,
            "SLUICE_LOOP_INTERVAL": f"{self.loop_interval:g}",
            "SLUICE_DAG_REFRESH_INTERVAL": "0.5",
            "SLUICE_PARSE_TIMEOUT": "120",  # 10,000-task DAG files
            "SLUICE_HEARTBEAT_TIMEOUT": "150",  # above the parse timeout, as Settings checks
        } | self.extra_env

    @property
    def env(self) -> dict[str, str]:
        return clean_env(self.env_vars)

    @property
    def settings(self) -> Settings:
        return Settings.from_env(self.env_vars)

    @property
    def factory(self) -> sessionmaker[Session]:
        if self._factory is None:
            # No pre-ping: a ping is a round trip and a commit of its own in
            # pg_stat_database, which would count the bench's polling into W6.
            self._engine = create_engine(
                self.db.url, pool_size=2, connect_args={"application_name": "sluice-bench"}
            )
            self._factory = make_session_factory(self._engine)
        return self._factory

    def migrate(self) -> None:
        run_cli([*sluice_argv(), "db", "migrate"], self.env, timeout=120)

    def sync_dags(self, expect: Sequence[str]) -> None:
        """Parse the DAGs folder into the database now (the scheduler then finds it current)."""
        result = sync_dag_folder(self.factory, self.dags_folder, parse_timeout=120.0, now=utcnow())
        if result.errors:
            raise BenchError(f"DAG files failed to import: {result.errors}")
        with self.factory() as session:
            have = set(session.scalars(select(Dag.dag_id).where(Dag.is_active.is_(True))))
        missing = sorted(set(expect) - have)
        if missing:
            raise BenchError(f"DAGs missing after sync: {missing}")

    def start_scheduler(self) -> Proc:
        n = len(self.schedulers)
        proc = Proc(
            f"scheduler-{n}",
            [*sluice_argv(), "scheduler"],
            self.env,
            self.log_dir / f"scheduler-{n}.log",
        )
        self.schedulers.append(proc)

        def registered() -> bool:
            with self.factory() as session:
                count = session.scalar(
                    select(func.count()).where(Job.pid == proc.pid, Job.state == JobState.RUNNING)
                )
            return bool(count)

        wait_until(registered, 60, f"{proc.name} to register its job", proc)
        # else a wake-up sent now is lost and a run waits a loop interval
        wait_until(
            lambda: self._listeners() >= len(self.schedulers),
            60,
            f"{proc.name} to listen for wake-ups",
            proc,
        )
        return proc

    def _listeners(self) -> int:
        """Processes listening for this deployment's wake-ups: on Redis's channel, or
        PostgreSQL's (`broker.pg_wakeup`, when the broker is not Redis)."""
        if wakeup_url(self.settings) is None:
            with self.factory() as session:
                return int(
                    session.scalar(
                        text(
                            "SELECT count(*) FROM pg_stat_activity WHERE datname = "
                            "current_database() AND application_name = 'sluice-waker-listen'"
                        )
                    )
                    or 0
                )
        client = redis.Redis.from_url(self.broker_url)
        try:
            return int(client.pubsub_numsub(wakeup_channel(self.broker_url, self.namespace))[0][1])
        finally:
            client.close()

    def start_worker(self, concurrency: int = 4) -> Proc:
        n = self._workers_started  # worker-N.log: one per worker ever started
        self._workers_started += 1
        argv = [*sluice_argv(), "worker", "-c", str(concurrency)]
        env = clean_env(self.env_vars | self.worker_env)
        proc = Proc(f"worker-{n}", argv, env, self.log_dir / f"worker-{n}.log")
        self.workers.append(proc)
        proc.wait_for_log(" ready.", timeout=60)
        return proc

    def start_triggerer(self, capacity: int = 1000) -> Proc:
        """`sluice triggerer --capacity N`; returns once its job row is registered (a
        running `triggerer` job with its pid)."""
        n = len(self.triggerers)
        argv = [*sluice_argv(), "triggerer", "--capacity", str(capacity)]
        proc = Proc(f"triggerer-{n}", argv, self.env, self.log_dir / f"triggerer-{n}.log")
        self.triggerers.append(proc)

        def registered() -> bool:
            with self.factory() as session:
                count = session.scalar(
                    select(func.count()).where(
                        Job.job_type == "triggerer",
                        Job.pid == proc.pid,
                        Job.state == JobState.RUNNING,
                    )
                )
            return bool(count)

        wait_until(registered, 60, f"{proc.name} to register its job", proc)
        return proc

    def stop_triggerer(self, proc: Proc) -> None:
        proc.stop()
        self.triggerers.remove(proc)

    def start_api(self, token: str) -> Proc:
        """`sluice api --host 127.0.0.1 --port <a free port>` with `SLUICE_API_TOKEN=token`;
        returns once GET /api/v1/health answers."""
        port = free_port()
        argv = [*sluice_argv(), "api", "--host", "127.0.0.1", "--port", str(port)]
        env = clean_env(self.env_vars | {"SLUICE_API_TOKEN": token})
        proc = Proc("api", argv, env, self.log_dir / "api.log")
        self.api, self.api_port, self.api_token = proc, port, token
        wait_until(lambda: health_answers(port), 60, "the API's GET /api/v1/health", proc, 0.1)
        return proc

    def stop_workers(self) -> None:
        for proc in self.workers:
            proc.stop()
        self.workers.clear()

    def stop_api(self) -> None:
        if self.api is not None:
            self.api.stop()
            self.api = None

    def stop_scheduler(self, proc: Proc) -> None:
        proc.stop()
        self.schedulers.remove(proc)

    def stop_all(self) -> None:
        self.stop_api()
        for proc in [*self.schedulers, *self.workers, *self.triggerers]:
            proc.stop()
        self.schedulers.clear()
        self.workers.clear()
        self.triggerers.clear()
        if self._waker is not None:
            self._waker.close()
        if self._engine is not None:
            self._engine.dispose()

    # -- runs ------------------------------------------------------------------------------
    def trigger(self, dag_id: str, count: int = 1, prefix: str = "bench") -> list[int]:
        """Create `count` manual runs of `dag_id` in one transaction, then wake the schedulers."""
        now = utcnow()
        with transaction(self.factory) as session:
            dag = session.get(Dag, dag_id)
            if dag is None:
                raise BenchError(f"unknown DAG {dag_id}")
            runs = [
                create_dagrun(
                    session,
                    dag,
                    run_type=RunType.MANUAL,
                    logical_date=now + dt.timedelta(microseconds=i),
                    now=now,
                    run_id=f"{prefix}-{now.timestamp():.6f}-{i}",
                )
                for i in range(count)
            ]
            pks = [run.id for run in runs]
        self.wake()
        return pks

    def wake(self) -> None:
        if self._waker is None:
            self._waker = waker_for(self.settings)
        self._waker.wake()

    def finished(self, run_pks: Sequence[int]) -> tuple[int, int]:
        """(finished runs, failed runs) among `run_pks`; read-only, rolled back."""
        with self.factory() as session:
            rows = session.execute(
                select(DagRun.state, func.count())
                .where(DagRun.id.in_(list(run_pks)))
                .group_by(DagRun.state)
            ).all()
        counts = {str(state): int(n) for state, n in rows}
        done = counts.get(DagRunState.SUCCESS, 0) + counts.get(DagRunState.FAILED, 0)
        return done, counts.get(DagRunState.FAILED, 0)

    def wait_runs(self, run_pks: Sequence[int], timeout: float, every: float = 0.05) -> float:
        """Wait until every run finished; seconds waited. BenchError on a failed run."""
        started = time.monotonic()
        deadline = started + timeout
        while True:
            done, failed = self.finished(run_pks)
            if failed:
                raise BenchError(f"{failed} of {len(run_pks)} runs failed; see {self.log_dir}")
            if done == len(run_pks):
                return time.monotonic() - started
            if time.monotonic() > deadline:
                raise BenchError(
                    f"{len(run_pks) - done} of {len(run_pks)} runs unfinished after {timeout:g}s"
                )
            for proc in [*self.schedulers, *self.workers, *self.triggerers]:
                proc.check_alive()
            time.sleep(every)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def health_answers(port: int) -> bool:
    """Whether GET /api/v1/health on 127.0.0.1:`port` answers 200."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", "/api/v1/health")
        return conn.getresponse().status == 200
    except OSError:
        return False
    finally:
        conn.close()
