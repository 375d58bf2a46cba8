"""`GET /api/v1/health`: is the database reachable, are schedulers alive, are workers seen.

Invariants:
- It answers within about two seconds whatever is down: the broker is pinged
  with a short timeout before workers are asked, and the workers' answer is
  awaited at most `WORKER_TIMEOUT` (in a thread, so a stuck broker call is left
  behind, not waited for).
- 200 when the database answers (status `ok`, or `degraded` when no scheduler is
  alive or no worker was seen), 503 when it does not. Error details name the
  kind of failure only, never a URL, host or credential.
"""

from __future__ import annotations

import datetime as dt
import logging
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Literal
from urllib.parse import urlparse

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from sqlalchemy import select, text

from sluice.broker.app import create_app
from sluice.scheduler.api.deps import CanRead, State
from sluice.scheduler.api.responses import errors
from sluice.scheduler.api.schemas import (
    DatabaseHealth,
    Health,
    SchedulerHealth,
    WorkerHealth,
    WorkersHealth,
)
from sluice.scheduler.api.state import ApiState
from sluice.scheduler.core.db import utcnow
from sluice.scheduler.core.models import Job
from sluice.scheduler.core.states import JobState

log = logging.getLogger(__name__)

WORKER_TIMEOUT = 1.0
"""Seconds the workers get to answer (Celery waits this long for replies)."""

BROKER_PING_TIMEOUT = 0.5

router = APIRouter(prefix="/api/v1", tags=["health"])


def _database(state: ApiState) -> tuple[DatabaseHealth, list[SchedulerHealth]]:
    try:
        with state.factory() as session:
            session.execute(text("SELECT 1"))
            jobs = session.scalars(
                select(Job)
                .where(Job.job_type == "scheduler", Job.state == JobState.RUNNING)
                .order_by(Job.id)
            ).all()
    except Exception as exc:
        log.warning("health: database unreachable: %s", exc)
        return DatabaseHealth(ok=False, detail=f"unreachable ({type(exc).__name__})"), []
    cutoff = utcnow() - dt.timedelta(seconds=state.settings.heartbeat_timeout)
    schedulers = [
        SchedulerHealth(
            job_id=job.id,
            hostname=job.hostname,
            pid=job.pid,
            latest_heartbeat=job.latest_heartbeat,
            alive=job.latest_heartbeat >= cutoff,
        )
        for job in jobs
    ]
    return DatabaseHealth(ok=True, detail="reachable"), schedulers


def _ping_broker(url: str) -> None:
    """Raise if a Redis broker does not answer PING quickly (other brokers: no check)."""
    if urlparse(url).scheme not in ("redis", "rediss"):
        return
    import redis

    client = redis.Redis.from_url(
        url, socket_timeout=BROKER_PING_TIMEOUT, socket_connect_timeout=BROKER_PING_TIMEOUT
    )
    try:
        client.ping()
    finally:
        client.close()


def _ask_workers(state: ApiState) -> dict[str, Any]:
    if state.celery is None:
        state.celery = create_app(state.settings)
    replies = state.celery.control.inspect(timeout=WORKER_TIMEOUT).active_queues()
    return dict(replies or {})


def _workers(state: ApiState) -> WorkersHealth:
    if state.settings.embedded_broker:
        return WorkersHealth(ok=None, seen=[], detail="embedded broker: not asked")
    try:
        _ping_broker(state.settings.broker_url)
    except Exception as exc:
        log.warning("health: broker unreachable: %s", exc)
        return WorkersHealth(ok=None, seen=[], detail=f"broker unreachable ({type(exc).__name__})")
    future = state.inspector.submit(_ask_workers, state)
    try:
        replies = future.result(timeout=WORKER_TIMEOUT + 1.0)
    except FutureTimeout:
        return WorkersHealth(ok=None, seen=[], detail="the broker did not answer in time")
    except Exception as exc:
        log.warning("health: asking workers failed: %s", exc)
        return WorkersHealth(ok=None, seen=[], detail=f"workers not asked ({type(exc).__name__})")
    prefix = f"{state.settings.namespace}."
    seen = []
    for name, queues in sorted(replies.items()):
        mine = sorted(
            q["name"][len(prefix) :]
            for q in queues or []
            if isinstance(q, dict) and str(q.get("name", "")).startswith(prefix)
        )
        if mine:
            seen.append(WorkerHealth(name=name, queues=mine))
    detail = f"{len(seen)} worker(s) answered" if seen else "no worker answered"
    return WorkersHealth(ok=bool(seen), seen=seen, detail=detail)


@router.get(
    "/health",
    response_model=Health,
    dependencies=[CanRead],
    responses={**errors(), 503: {"model": Health, "description": "the database is unreachable"}},
)
def health(state: State) -> Any:
    database, schedulers = _database(state)
    workers = _workers(state)
    alive = sum(s.alive for s in schedulers)
    status: Literal["ok", "degraded", "unavailable"]
    if not database.ok:
        status = "unavailable"
    elif alive and workers.ok:
        status = "ok"
    else:
        status = "degraded"
    body = Health(
        status=status,
        database=database,
        schedulers=schedulers,
        schedulers_alive=alive,
        workers=workers,
    )
    if not database.ok:
        return JSONResponse(body.model_dump(mode="json"), status_code=503)
    return body
