"""Waking schedulers when a TaskInstance finishes or a run is triggered.

A wake-up is a hint, never a message that must arrive: schedulers loop on their
own interval anyway, and a lost wake-up costs at most one loop interval.
`wake()` never raises; `wait()` returns True if at least one wake-up arrived and
drains every pending one, so one wait covers a burst of finishing tasks.

A wake-up may name the DagRun that has news (a worker finished one of its
tasks); `take_news()` returns the run ids heard since the last call, or None
when some wake-up named no run (look at everything).

Over Redis, the news of an unclaimed run (the schedulers' runs) is shared, not
broadcast: the run id goes into one Redis set and the wake-up only says "news";
the first scheduler to take news pops the set (SPOP), so each run's news is
examined by one scheduler and several schedulers split the work instead of all
examining every run. A scheduler pops at most one batch (`runs_per_loop`) at a
time and hands back (`share`) the runs it started but could not examine in its
pass, so a burst of runs is split between the schedulers too. The news of a run
claimed by a job (a backfill) is broadcast with its id, as the claiming job may
be any of the listeners.

Anything that can write to Redis can publish on the channel or add to the set: a payload or
member that is not a run id (nor `*`) is dropped with one WARNING per kind and process
(`broker.untrusted`), and wakes nothing. Members are popped, so junk is read once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Collection
from typing import Any, Protocol
from urllib.parse import parse_qs, urlparse

import redis
from redis.backoff import NoBackoff
from redis.client import PubSub
from redis.retry import Retry

from sluice.broker.untrusted import dropped, parse_run_id
from sluice.broker.wakeup_news import News, payload_of
from sluice.scheduler.core.settings import DEFAULTS, Settings

log = logging.getLogger(__name__)

_SOCKET_TIMEOUT = 2.0


class Waker(Protocol):
    def wake(self, run_id: int | None = None, *, shared: bool = False) -> None:
        """Wake every waiting scheduler, naming the run with news; never raises.

        `shared`: the run's news is for one scheduler, whichever takes it first.
        """

    def listen(self) -> None:
        """Start hearing wake-ups now (the subscription the first `wait` would open), so a
        wake-up sent before that wait still wakes it; never raises. A scheduler listens
        before its first pass: a run triggered during that pass is not left for a loop
        interval."""

    def wait(self, timeout: float) -> bool:
        """Block up to `timeout` seconds; True if woken (all pending wake-ups are drained)."""

    def take_news(self) -> set[int] | None:
        """Run ids heard since the last call; None if a wake-up named no run."""

    def share(self, run_ids: Collection[int]) -> None:
        """Put runs' news where any scheduler (this one too) takes them, and wake the
        schedulers; never raises (on a broker error this waker keeps them)."""

    def close(self) -> None:
        """Release connections; the waker is not used afterwards."""


_SHARED = b"+"
"""The wake-up payload that says: news are in the shared set."""
_NEWS_TTL = 3600
"""Seconds the shared set outlives its last addition (no scheduler running)."""


class LocalWaker:
    """An in-process waker for the embedded mode (scheduler and worker in one process).

    Built on one `threading.Event`: meant for one waiting scheduler; any number of
    threads may wake it.
    """

    def __init__(self) -> None:
        self._event = threading.Event()
        self._news = News()

    def wake(self, run_id: int | None = None, *, shared: bool = False) -> None:
        self._news.add(payload_of(run_id))  # one scheduler per process: nothing to share
        self._event.set()

    def take_news(self) -> set[int] | None:
        return self._news.take()

    def listen(self) -> None:
        """In-process: a wake-up sets the event whenever it comes."""

    def share(self, run_ids: Collection[int]) -> None:
        self._news.add_runs(run_ids)
        self._event.set()

    def wait(self, timeout: float) -> bool:
        woken = self._event.wait(timeout)
        self._event.clear()
        return woken

    def close(self) -> None:
        self._event.set()


def redis_db(url: str) -> int:
    """The database number of a redis:// URL (path `/N`, or `?db=N`; 0 if absent)."""
    parsed = urlparse(url)
    path = parsed.path.strip("/")
    if path.isdigit():
        return int(path)
    db = parse_qs(parsed.query).get("db")
    if db and db[0].isdigit():
        return int(db[0])
    return 0


def wakeup_channel(url: str, namespace: str) -> str:
    """The pub/sub channel: pub/sub ignores db numbers, so the db is part of the name."""
    return f"{namespace}:{redis_db(url)}:wakeup"


class RedisWaker:
    """Wake-ups over Redis pub/sub, across processes and hosts.

    The subscription is opened by `listen()` or the first `wait()`; wake-ups published
    before it are not seen (shared news stay in the set for the next `take_news`). After a lost
    connection the next `wait()` subscribes again; while Redis is down `wait()` sleeps
    its timeout and returns False. Not thread-safe for concurrent `wait()` calls;
    `wake()` may be called from any thread.
    """

    def __init__(self, url: str, namespace: str, batch: int = DEFAULTS.runs_per_loop) -> None:
        self.url = url
        self.namespace = namespace
        self.batch = batch
        """Run ids popped from the shared set at most per `take_news`."""
        self.channel = wakeup_channel(url, namespace)
        self.news_key = f"{namespace}:news"
        self._shared_news = False
        self._client: redis.Redis | None = None
        self._pubsub: PubSub | None = None
        self._lock = threading.Lock()
        self._news = News()

    def _redis(self) -> redis.Redis:
        with self._lock:
            if self._client is None:
                self._client = redis.Redis.from_url(
                    self.url,
                    socket_timeout=_SOCKET_TIMEOUT,
                    socket_connect_timeout=_SOCKET_TIMEOUT,
                    retry=Retry(NoBackoff(), 0),
                    health_check_interval=30,
                    client_name=f"{self.namespace}-waker",
                )
            return self._client

    def take_news(self) -> set[int] | None:
        """Broadcast news, plus the shared set's (popped when a wake-up said so, and
        when looking at everything, so that news already covered are not kept)."""
        runs = self._news.take()
        pending, self._shared_news = self._shared_news, False
        if not pending and runs is not None:
            return runs
        popped = self._pop_shared()
        return None if runs is None or popped is None else runs | popped

    def _pop_shared(self) -> set[int] | None:
        """Pop the shared news; None if Redis failed (then look at everything)."""
        try:
            popped: Any = self._redis().spop(self.news_key, self.batch)
        except Exception as exc:
            log.debug("shared news %s not read: %s", self.news_key, exc)
            return None
        members = list(popped or [])  # SPOP with a count: a list of members
        self._shared_news = len(members) >= self.batch  # more left: pop again next time
        runs = set()
        for member in members:  # popped: junk is read once, and gone
            run_id = parse_run_id(member)
            if run_id is None:
                dropped("a shared-news member", self.news_key, member, "not a run id")
            else:
                runs.add(run_id)
        return runs

    def share(self, run_ids: Collection[int]) -> None:
        if not run_ids:
            return
        try:
            pipe = self._redis().pipeline(transaction=False)
            pipe.sadd(self.news_key, *run_ids)
            pipe.expire(self.news_key, _NEWS_TTL)
            pipe.publish(self.channel, _SHARED)
            pipe.execute()
            self._shared_news = True
        except Exception as exc:  # then examine them here
            log.debug("news of %d runs not shared: %s", len(run_ids), exc)
            self._news.add_runs(run_ids)

    def wake(self, run_id: int | None = None, *, shared: bool = False) -> None:
        try:
            if run_id is None or not shared:
                self._redis().publish(self.channel, payload_of(run_id))
                return
            pipe = self._redis().pipeline(transaction=False)
            pipe.sadd(self.news_key, run_id)
            pipe.expire(self.news_key, _NEWS_TTL)
            pipe.publish(self.channel, _SHARED)
            pipe.execute()
        except Exception as exc:  # best-effort by contract
            log.debug("wake-up on %s not sent: %s", self.channel, exc)

    def listen(self) -> None:
        try:
            self._subscribed()
        except Exception as exc:  # the next wait subscribes again
            log.debug("wake-up channel %s unavailable: %s", self.channel, exc)
            self._drop_pubsub()

    def wait(self, timeout: float) -> bool:
        """As `Waker.wait`; returns at once when shared news are known to be left."""
        deadline = time.monotonic() + max(timeout, 0.0)
        try:
            pubsub = self._subscribed()
            woken = self._shared_news
            while True:
                left = deadline - time.monotonic()
                # Once woken, only drain what is already there.
                message = pubsub.get_message(
                    ignore_subscribe_messages=True, timeout=0.0 if woken else max(left, 0.0)
                )
                if message is not None:
                    data = message.get("data")
                    if data == _SHARED:
                        self._shared_news = woken = True
                    elif self._news.add(data, self.channel):
                        woken = True
                    continue
                if woken or left <= 0:
                    return woken
        except Exception as exc:
            log.debug("wake-up channel %s unavailable: %s", self.channel, exc)
            self._drop_pubsub()
            self._news.add(None)  # wake-ups may have been lost: look at everything
            time.sleep(max(deadline - time.monotonic(), 0.0))
            return False

    def _subscribed(self) -> PubSub:
        if self._pubsub is None:
            pubsub = self._redis().pubsub()
            try:
                pubsub.subscribe(self.channel)
            except Exception:
                pubsub.close()
                raise
            self._pubsub = pubsub
        return self._pubsub

    def _drop_pubsub(self) -> None:
        pubsub, self._pubsub = self._pubsub, None
        if pubsub is not None:
            try:
                pubsub.close()
            except Exception as exc:
                log.debug("closing wake-up subscription: %s", exc)

    def close(self) -> None:
        self._drop_pubsub()
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()


_local_wakers: dict[str, LocalWaker] = {}
_local_lock = threading.Lock()


def local_waker(namespace: str) -> LocalWaker:
    """The process's LocalWaker for `namespace`: the embedded scheduler and worker share it,
    as they share the process-wide `memory://` broker."""
    with _local_lock:
        waker = _local_wakers.get(namespace)
        if waker is None:
            waker = _local_wakers[namespace] = LocalWaker()
        return waker


REDIS_SCHEMES = ("redis", "rediss", "unix")


def wakeup_url(settings: Settings) -> str | None:
    """The Redis URL wake-ups go through: `SLUICE_WAKEUP_URL`, else the broker's when it
    is Redis; None when there is none (a RabbitMQ broker and no `SLUICE_WAKEUP_URL`)."""
    if settings.wakeup_url:
        return settings.wakeup_url
    if urlparse(settings.broker_url).scheme in REDIS_SCHEMES:
        return settings.broker_url
    return None


def waker_for(settings: Settings) -> Waker:
    """The waker of a deployment: in-process when embedded, Redis pub/sub when there is a
    Redis to go through (`wakeup_url`), else PostgreSQL `LISTEN`/`NOTIFY` on the shared
    database (`broker.pg_wakeup`); on SQLite without Redis a waker of this process alone,
    so the schedulers rely on their full pass each `SLUICE_LOOP_INTERVAL` for what other
    processes did."""
    if settings.embedded_broker:
        return local_waker(settings.namespace)
    url = wakeup_url(settings)
    if url is not None:
        return RedisWaker(url, settings.namespace, batch=settings.runs_per_loop)
    from sluice.broker.pg_wakeup import PgWaker, is_postgresql

    if is_postgresql(settings.database_url):
        return PgWaker(settings.database_url, settings.namespace)
    return LocalWaker()
