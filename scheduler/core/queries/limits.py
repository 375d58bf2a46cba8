"""Concurrency keys and rate-limit buckets in the database.

A TI holds a slot of (`concurrency`, `concurrency_key`) while it is `queued` or
`running` with its key set: slots are counted from the TIs themselves, so every move of
a TI out of those states (a result, a cancel, a mark, a timeout, the sweep of a dead
worker) frees its slot in that move's own transaction, and no slot can leak.

Invariants:
- Whoever gives a slot (a worker writing a key on its running TI, a queueing
  transaction queueing a TI whose key is known) first takes the key's lock
  (`lock_keys`: a transaction-scoped advisory lock on PostgreSQL; SQLite has one
  writer), then counts the holders in a statement that starts after the lock was
  granted: two givers of one key are serialised and never over-fill it.
- Lock order: a TI's row, then its keys' locks (sorted), then the buckets' rows
  (`lock_buckets`, FOR UPDATE in name order). A key's lock holder waits on nothing.
- A bucket holds `tokens` as of `refilled_at`; it is refilled (at `amount` per
  `per_seconds`, up to `amount`) and taken from only under its row's lock.
"""

from __future__ import annotations

import datetime as dt
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, or_, select, text, tuple_
from sqlalchemy.orm import Session

from sluice.scheduler.core.models import RateLimit, TaskInstance
from sluice.scheduler.core.queries.sql import is_scheduled
from sluice.scheduler.core.states import TI_ACTIVE
from sluice.scheduler.core.upsert import upsert

KEY_LOCK_SPACE = 0x5C01
"""The first key of the two-key advisory locks of concurrency keys (Sluice takes no
other advisory lock; a user's own locks in the database are unlikely to use it)."""

Key = tuple[str, str]
"""(concurrency name, key)."""


def lock_keys(session: Session, keys: Iterable[Key]) -> None:
    """Take each key's lock until the transaction ends, in sorted order."""
    if session.get_bind().dialect.name != "postgresql":
        return  # SQLite: the transaction (BEGIN IMMEDIATE) is the only writer
    for name, key in sorted(set(keys)):
        digest = zlib.crc32(f"{name}\0{key}".encode()) - 2**31  # a signed int4
        session.execute(
            text("SELECT pg_advisory_xact_lock(:space, :digest)"),
            {"space": KEY_LOCK_SPACE, "digest": digest},
        )


def slots_in_use(session: Session, keys: Iterable[Key]) -> dict[Key, int]:
    """How many TIs hold a slot of each of `keys` (queued or running, key set)."""
    wanted = sorted(set(keys))
    if not wanted:
        return {}
    ti = TaskInstance
    rows = session.execute(
        select(ti.concurrency, ti.concurrency_key, func.count())
        .where(
            ti.concurrency_key.is_not(None),
            tuple_(ti.concurrency, ti.concurrency_key).in_(wanted),
            ti.state.in_(list(TI_ACTIVE)),
        )
        .group_by(ti.concurrency, ti.concurrency_key)
    ).all()
    found = {(str(name), str(key)): int(n) for name, key, n in rows}
    return {k: found.get(k, 0) for k in wanted}


def any_waiting(session: Session) -> bool:
    """Whether a TI waits for a concurrency key's slot or a rate limit's token: one probe
    of the partial index `ix_task_instance_limited` (empty but for such TIs), so a
    queueing pass without them costs one cheap query."""
    ti = TaskInstance.__table__.c
    found = session.execute(
        select(ti.id)
        .where(
            is_scheduled(ti.state),
            or_(ti.concurrency_key.is_not(None), ti.rate_limit.is_not(None)),
        )
        .limit(1)
    ).first()
    return found is not None


def full_keys(session: Session) -> list[Key]:
    """The keys whose slots are all held (by their TIs' smallest limit): unlocked, a
    filter for the candidates (the locked count decides)."""
    ti = TaskInstance
    rows = session.execute(
        select(ti.concurrency, ti.concurrency_key)
        .where(ti.concurrency_key.is_not(None), ti.state.in_(list(TI_ACTIVE)))
        .group_by(ti.concurrency, ti.concurrency_key)
        .having(func.count() >= func.min(ti.concurrency_limit))
    ).all()
    return [(str(name), str(key)) for name, key in rows]


@dataclass(frozen=True)
class Holder:
    """A TI holding a slot of a key."""

    concurrency: str
    key: str
    limit: int
    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    state: str

    def as_dict(self) -> dict[str, object]:
        """The holding TI, as `--json` and explain's data show it."""
        return {
            "dag_id": self.dag_id,
            "run_id": self.run_id,
            "task_id": self.task_id,
            "map_index": self.map_index,
            "state": self.state,
        }


def holders(session: Session, keys: Iterable[Key] | None = None, limit: int = 1000) -> list[Holder]:
    """The TIs holding slots (of `keys`, or of every key), by name, key, then DAG."""
    ti = TaskInstance
    stmt = select(
        ti.concurrency,
        ti.concurrency_key,
        ti.concurrency_limit,
        ti.dag_id,
        ti.run_id,
        ti.task_id,
        ti.map_index,
        ti.state,
    ).where(ti.concurrency_key.is_not(None), ti.state.in_(list(TI_ACTIVE)))
    if keys is not None:
        wanted = sorted(set(keys))
        if not wanted:
            return []
        stmt = stmt.where(tuple_(ti.concurrency, ti.concurrency_key).in_(wanted))
    stmt = stmt.order_by(
        ti.concurrency, ti.concurrency_key, ti.dag_id, ti.run_id, ti.task_id, ti.map_index
    ).limit(limit)
    return [
        Holder(str(r[0]), str(r[1]), int(r[2] or 0), r[3], r[4], r[5], int(r[6]), str(r[7]))
        for r in session.execute(stmt).all()
    ]


def waiting_for_keys(session: Session, limit: int = 1000) -> dict[Key, int]:
    """How many scheduled TIs wait for each key (their key known, a slot not held)."""
    ti = TaskInstance
    rows = session.execute(
        select(ti.concurrency, ti.concurrency_key, func.count())
        .where(ti.concurrency_key.is_not(None), ti.state == "scheduled")
        .group_by(ti.concurrency, ti.concurrency_key)
        .limit(limit)
    ).all()
    return {(str(name), str(key)): int(n) for name, key, n in rows}


def record_rate_limits(session: Session, spec: Mapping[str, Any], now: dt.datetime) -> None:
    """A bucket row for every `RateLimit` the tasks of `spec` (a DAG version) name; an
    existing bucket takes the version's amount and period, and keeps its tokens."""
    seen: dict[str, Mapping[str, Any]] = {}
    for task in (spec.get("tasks") or {}).values():
        limit = task.get("rate_limit")
        if limit:
            seen[str(limit["name"])] = limit
    for name in sorted(seen):
        limit = seen[name]
        values = {
            "name": name,
            "amount": int(limit["limit"]),
            "per_seconds": float(limit["per"]),
            "tokens": float(limit["limit"]),
            "refilled_at": now,
        }
        upsert(session, RateLimit, values, keys=["name"], update=["amount", "per_seconds"])


@dataclass
class Bucket:
    """A bucket as locked, refilled to `now`: `tokens` may be taken until it is saved."""

    name: str
    amount: int
    per_seconds: float
    tokens: float

    def take(self) -> bool:
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True

    def next_token_in(self) -> float:
        """Seconds until the bucket holds a whole token again (0 if it holds one)."""
        return max(0.0, (1 - self.tokens) * self.per_seconds / self.amount)


def refilled(row: RateLimit, now: dt.datetime) -> Bucket:
    """`row`'s bucket refilled from its `refilled_at` to `now`."""
    elapsed = max(0.0, (now - row.refilled_at).total_seconds())
    tokens = min(float(row.amount), row.tokens + elapsed * row.amount / row.per_seconds)
    return Bucket(row.name, row.amount, row.per_seconds, tokens)


def lock_buckets(session: Session, names: Iterable[str], now: dt.datetime) -> dict[str, Bucket]:
    """The buckets `names`, rows locked FOR UPDATE in name order, refilled to `now`."""
    wanted = sorted(set(names))
    if not wanted:
        return {}
    rows = session.scalars(
        select(RateLimit)
        .where(RateLimit.name.in_(wanted))
        .order_by(RateLimit.name)
        .with_for_update()
    ).all()
    return {row.name: refilled(row, now) for row in rows}


def save_buckets(session: Session, buckets: Iterable[Bucket], now: dt.datetime) -> None:
    """Write the locked `buckets` back, as of `now`."""
    for bucket in buckets:
        row = session.get(RateLimit, bucket.name)
        if row is not None:
            row.tokens = bucket.tokens
            row.refilled_at = now
    session.flush()


def read_buckets(
    session: Session, now: dt.datetime, names: Iterable[str] | None = None
) -> list[Bucket]:
    """The buckets (of `names`, or all), refilled to `now`, unlocked: for reading."""
    stmt = select(RateLimit).order_by(RateLimit.name)
    if names is not None:
        stmt = stmt.where(RateLimit.name.in_(sorted(set(names))))
    return [refilled(row, now) for row in session.scalars(stmt).all()]
