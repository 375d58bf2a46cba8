"""Queueing the scheduled TIs that wait for a limit: a concurrency key's slot (their
key known: a retry, or a try a worker gave back) or a rate limit's token.

Only a scheduler's pass queues them (`queueing.queue_scheduled(limited=True)`); the
workers' fills leave them (`lock_scheduled_tis`, `queue_next_waiting`).

Invariants (in the queueing transaction, after every pool row's lock, `Capacity`):
- Candidates are locked SKIP LOCKED, then their keys' locks are taken (sorted), then
  the slots in use counted, then their buckets' rows locked (name order) and refilled:
  lock order TI, key, bucket, as everywhere (`core.queries.limits`).
- A TI is queued only if its key has a slot free (holders < its limit), its bucket
  has a whole token, and its pool and DAG have room; what it takes is booked, so
  one pass never over-fills a key, a bucket or a pool. The buckets are written back
  in the same transaction: a token is taken and its TI queued together, or neither.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import ColumnElement
from sqlalchemy.orm import Session

from sluice.scheduler.core.queries.limits import (
    Bucket,
    Key,
    any_waiting,
    full_keys,
    lock_buckets,
    lock_keys,
    read_buckets,
    save_buckets,
    slots_in_use,
)
from sluice.scheduler.core.queries.tis import lock_scheduled_tis

log = logging.getLogger(__name__)


@dataclass
class Limits:
    """The keys' slots in use and the buckets, locked: what the pass may still take."""

    used: dict[Key, int] = field(default_factory=dict)
    buckets: dict[str, Bucket] = field(default_factory=dict)

    def take(self, row: Any) -> bool:
        """Book `row`'s slot and token if both are free (nothing booked otherwise)."""
        key = _key_of(row)
        if key is not None and self.used.get(key, 0) >= int(row.concurrency_limit or 1):
            return False
        if row.rate_limit is not None:
            bucket = self.buckets.get(row.rate_limit)
            if bucket is None:
                log.warning(
                    "TI %s names rate limit %r, which has no bucket", row.id, row.rate_limit
                )
            elif not bucket.take():
                return False
        if key is not None:
            self.used[key] = self.used.get(key, 0) + 1
        return True

    def give_back(self, row: Any) -> None:
        """Undo `take` for a row another limit (its pool, its DAG) refused."""
        key = _key_of(row)
        if key is not None:
            self.used[key] -= 1
        bucket = self.buckets.get(row.rate_limit) if row.rate_limit is not None else None
        if bucket is not None:
            bucket.tokens += 1


def _key_of(row: Any) -> Key | None:
    if row.concurrency is None or row.concurrency_key is None:
        return None
    return (str(row.concurrency), str(row.concurrency_key))


def lock_limited(
    session: Session,
    *,
    runs: ColumnElement[bool],
    limit: int,
    now: dt.datetime,
    skip_dags: Sequence[str] = (),
    skip_pools: Sequence[str] = (),
) -> tuple[list[Any], Limits]:
    """The scheduled TIs waiting for a limit (at most `limit`, by priority then age,
    SKIP LOCKED), and their limits locked and read. Those of full keys, empty buckets,
    `skip_dags` and `skip_pools` (as read before any lock) are left out, so they cannot
    fill the batch and starve the others."""
    if not any_waiting(session):
        return [], Limits()
    empty = [b.name for b in read_buckets(session, now) if b.tokens < 1]
    rows = lock_scheduled_tis(
        session,
        limit,
        runs,
        skip_dags,
        skip_pools,
        limited=True,
        skip_keys=full_keys(session),
        skip_buckets=empty,
    )
    if not rows:
        return [], Limits()
    keys = [k for k in map(_key_of, rows) if k is not None]
    lock_keys(session, keys)
    used = slots_in_use(session, keys)
    buckets = lock_buckets(session, (r.rate_limit for r in rows if r.rate_limit), now)
    return rows, Limits(used, buckets)


def save(session: Session, limits: Limits, now: dt.datetime) -> None:
    """The tokens taken, written in the queueing transaction."""
    save_buckets(session, limits.buckets.values(), now)
