"""Waking schedulers through PostgreSQL `LISTEN`/`NOTIFY`, for deployments without Redis.

With RabbitMQ (or any broker that is not Redis) and no `SLUICE_WAKEUP_URL`, the shared
database carries the wake-ups: it is there anyway, and a notification reaches every
listening scheduler in about a millisecond. The contract is `wakeup.Waker`'s: a wake-up
is a hint, `wake()` never raises, and a lost one costs at most a loop interval.

- `wake()` sends `pg_notify(channel, payload)` on a connection of its own, in
  autocommit (a statement of its own: never inside the caller's transaction, so a
  rolled-back trigger cannot lose it and a long one cannot delay it). The payload is
  a run id, or `*` for "look at everything".
- `wait()` listens on another connection (opened by `listen()` or the first call,
  `LISTEN` on the channel) and drains every pending notification once one arrived.
- News are broadcast: every scheduler hears every run id (Redis shares an unclaimed
  run's news through a set so that one scheduler examines it; here each examines it,
  which the run's row lock makes safe). `share()` sends the ids back as news, in
  payloads under PostgreSQL's 8,000-byte limit.

The channel is `sluice_wakeup:<namespace>`, so deployments sharing a database (each
with its own namespace) do not wake each other. Anyone who can connect to the database can
`NOTIFY` on it: a payload that is not a run id nor `*` is dropped (`wakeup_news.News.add`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Collection, Iterator
from typing import Any

import psycopg
from psycopg import sql
from sqlalchemy.engine import make_url

from sluice.broker.wakeup_news import News, payload_of

log = logging.getLogger(__name__)

_CONNECT_TIMEOUT = 2
_PAYLOAD_MAX = 7900
"""Bytes of one notification's payload at most (PostgreSQL refuses 8,000 and more)."""


def pg_conninfo(database_url: str) -> str:
    """The libpq connection string of a SQLAlchemy PostgreSQL URL (`+psycopg` dropped)."""
    url = make_url(database_url).set(drivername="postgresql")
    return url.render_as_string(hide_password=False)


def is_postgresql(database_url: str) -> bool:
    try:
        return make_url(database_url).get_backend_name() == "postgresql"
    except Exception:
        return False


def wakeup_channel(namespace: str) -> str:
    """The channel name: at most 63 bytes, as PostgreSQL identifiers are."""
    return f"sluice_wakeup:{namespace}".encode()[:63].decode(errors="ignore")


class PgWaker:
    """Wake-ups over PostgreSQL notifications (see the module). `wake()` and `share()`
    may be called from any thread; `wait()` from one thread at a time."""

    def __init__(self, database_url: str, namespace: str) -> None:
        self.conninfo = pg_conninfo(database_url)
        self.channel = wakeup_channel(namespace)
        self._news = News()
        self._send_lock = threading.Lock()
        self._sender: psycopg.Connection[Any] | None = None
        self._listener: psycopg.Connection[Any] | None = None

    def _connect(self, role: str) -> psycopg.Connection[Any]:
        return psycopg.connect(
            self.conninfo,
            autocommit=True,
            connect_timeout=_CONNECT_TIMEOUT,
            application_name=f"sluice-waker-{role}",
        )

    def _notify(self, payloads: list[str]) -> None:
        with self._send_lock:
            for attempt in (1, 2):  # a connection the server closed: once more on a new one
                try:
                    if self._sender is None or self._sender.closed:
                        self._sender = self._connect("send")
                    for payload in payloads:
                        self._sender.execute("SELECT pg_notify(%s, %s)", (self.channel, payload))
                    return
                except psycopg.Error as exc:
                    self._close_sender()
                    if attempt == 2:
                        log.debug("wake-up on %s not sent: %s", self.channel, exc)

    def wake(self, run_id: int | None = None, *, shared: bool = False) -> None:
        self._notify([payload_of(run_id).decode()])

    def share(self, run_ids: Collection[int]) -> None:
        if run_ids:
            self._notify(list(_chunks(run_ids)))

    def take_news(self) -> set[int] | None:
        return self._news.take()

    def listen(self) -> None:
        try:
            self._listening()
        except Exception as exc:  # the next wait listens again
            log.debug("wake-up channel %s unavailable: %s", self.channel, exc)
            self._close_listener()

    def wait(self, timeout: float) -> bool:
        deadline = time.monotonic() + max(timeout, 0.0)
        try:
            listener = self._listening()
            woken = False
            while True:
                left = 0.0 if woken else max(deadline - time.monotonic(), 0.0)
                got = False
                for notify in listener.notifies(timeout=left, stop_after=1):
                    got = True
                    for payload in notify.payload.split(","):  # junk wakes nothing
                        woken = self._news.add(payload, self.channel) or woken
                if not got and (woken or time.monotonic() >= deadline):
                    return woken
        except psycopg.Error as exc:
            log.debug("wake-up channel %s unavailable: %s", self.channel, exc)
            self._close_listener()
            self._news.add(None)  # wake-ups may have been lost: look at everything
            time.sleep(max(deadline - time.monotonic(), 0.0))
            return False

    def _listening(self) -> psycopg.Connection[Any]:
        if self._listener is None or self._listener.closed:
            listener = self._connect("listen")
            try:
                listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
            except psycopg.Error:
                listener.close()
                raise
            self._listener = listener
        return self._listener

    def _close_listener(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()

    def _close_sender(self) -> None:
        sender, self._sender = self._sender, None
        if sender is not None:
            sender.close()

    def close(self) -> None:
        self._close_listener()
        with self._send_lock:
            self._close_sender()


def _chunks(run_ids: Collection[int]) -> Iterator[str]:
    """Comma-separated run ids, each payload under `_PAYLOAD_MAX` bytes."""
    chunk: list[str] = []
    size = 0
    for run_id in run_ids:
        text = str(run_id)
        if chunk and size + len(text) + 1 > _PAYLOAD_MAX:
            yield ",".join(chunk)
            chunk, size = [], 0
        chunk.append(text)
        size += len(text) + 1
    if chunk:
        yield ",".join(chunk)
