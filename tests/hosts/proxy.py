"""Links a test can cut: one TCP proxy per (host, link), in a thread of the test process.

A `Link` listens on 127.0.0.1 on a free port and forwards every connection to one fixed
upstream address, one of the test's own services (its PostgreSQL, its Redis): traffic
goes nowhere else. The test changes what the link does while it runs:

- `cut()`: every open connection is reset (both sides, RST), and every new one is accepted
  and reset at once: to the client a cut link fails at once, as a refused connection does
  (the listening port stays the proxy's, so no other process can take it meanwhile);
- `hold()`: a partition: open connections stay open and new ones are accepted, but no byte
  goes through either way (a new connection is connected upstream only once restored);
  what was sent meanwhile is kept and delivered by `restore()`, as TCP retransmits it;
- `delay(ms)`: every round trip takes `ms` longer (`ms / 2` on each way, per chunk, in
  order: the latency of a longer wire, not a narrower one);
- `loss(share, stall_ms=200)`: TCP never shows a lost segment to the application: the
  sender retransmits it after its retransmission timeout (200 ms at least on Linux) and
  every byte behind it waits for it. So a lossy link is emulated as that: each chunk read
  (about one write of the sender) is, with probability `share`, held `stall_ms` longer,
  and the chunks after it in that direction wait behind it;
- `hold_after(*patterns)`: armed: the link holds (as `hold()`) right after it sent
  upstream a chunk that holds one of the byte strings: a statement the server runs and
  answers, and whose answer the host waits for until `restore()` (a host partitioned in
  the middle of a transaction, with what it locked still locked);
- `restore()`: back to a plain forward, no delay, no loss; held bytes go on.

`Proxies` owns the links of one test: one asyncio loop in one thread for all of them.
`close()` closes every link (listener and connections), stops the loop and joins the
thread; `made` lists every link it made, for the harness to check that each is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import random
import socket
import struct
import threading
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")

CHUNK = 65536
LOCALHOST = "127.0.0.1"


class Mode(enum.StrEnum):
    OPEN = "open"
    HELD = "held"
    CUT = "cut"


@dataclass
class Rules:
    """What a link does now (changed only on the proxy's loop)."""

    mode: Mode = Mode.OPEN
    delay: float = 0.0
    """Seconds added to each round trip (half on each way)."""
    loss: float = 0.0
    """Share of chunks stalled by `stall` seconds (a retransmission)."""
    stall: float = 0.2
    hold_after: tuple[bytes, ...] = ()
    """Hold the link once a chunk holding one of these is sent upstream (then cleared)."""


@dataclass
class Stats:
    accepted: int = 0
    reset: int = 0
    """Connections reset by a cut (open ones and refused new ones)."""
    stalled: int = 0
    """Chunks held back by `loss`."""
    bytes_up: int = 0
    bytes_down: int = 0


def _reset(writer: asyncio.StreamWriter | None) -> None:
    """Close a connection with a RST (SO_LINGER 0), not a FIN: the peer sees a reset."""
    if writer is None:
        return
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


@dataclass(eq=False)
class _Conn:
    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def reset(self) -> None:
        _reset(self.client)
        _reset(self.upstream)
        for task in self.tasks:
            if task is not asyncio.current_task():
                task.cancel()


class Link:
    """One proxy: `port` on 127.0.0.1 forwards to `upstream`, under the test's rules."""

    def __init__(self, proxies: Proxies, name: str, upstream: tuple[str, int]) -> None:
        self.proxies = proxies
        self.name = name
        self.upstream = upstream
        self.rules = Rules()
        self.stats = Stats()
        self.port = 0
        self._server: asyncio.Server | None = None
        self._conns: set[_Conn] = set()
        self._flowing: asyncio.Event | None = None
        self._handlers: set[asyncio.Task[Any]] = set()
        self._random = random.Random(name)
        self._last_due: dict[tuple[int, str], float] = {}

    def __repr__(self) -> str:
        return f"Link({self.name!r}, :{self.port} -> {self.upstream[0]}:{self.upstream[1]})"

    # -- what a test calls (from its own thread) ---------------------------------------
    def cut(self) -> None:
        """Reset every open connection; reset every new one at once, until `restore`."""
        self.proxies.call(self._set(mode=Mode.CUT))

    def hold(self) -> None:
        """Forward nothing, either way, on open and new connections, until `restore`."""
        self.proxies.call(self._set(mode=Mode.HELD))

    def hold_after(self, *patterns: bytes) -> None:
        """Hold the link once a chunk holding one of `patterns` has gone upstream."""
        self.proxies.call(self._set(hold_after=patterns))

    def wait_held(self, timeout: float = 30.0) -> None:
        """Wait until the link holds (after `hold_after`)."""
        deadline = time.monotonic() + timeout
        while self.rules.mode is not Mode.HELD:
            assert time.monotonic() < deadline, f"{self.name} was not held in {timeout}s"
            time.sleep(0.02)

    def delay(self, ms: float) -> None:
        """Every round trip `ms` milliseconds longer (half of it on each way)."""
        self.proxies.call(self._set(delay=ms / 1000))

    def loss(self, share: float, stall_ms: float = 200) -> None:
        """A `share` of chunks (each way) held `stall_ms` more, and what follows them."""
        assert 0 <= share <= 1
        self.proxies.call(self._set(loss=share, stall=stall_ms / 1000))

    def restore(self) -> None:
        """A plain forward again: no cut, no hold, no delay, no loss."""
        self.proxies.call(self._set(mode=Mode.OPEN, delay=0.0, loss=0.0, hold_after=()))

    @property
    def open_connections(self) -> int:
        return len(self._conns)

    # -- on the proxy's loop ---------------------------------------------------------------
    async def _start(self) -> None:
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server = await asyncio.start_server(self._accept, LOCALHOST, 0, backlog=128)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def _set(self, **changes: Any) -> None:
        assert self._flowing is not None
        for key, value in changes.items():
            setattr(self.rules, key, value)
        if self.rules.mode is Mode.CUT:
            for conn in list(self._conns):
                self.stats.reset += 1
                conn.reset()
            self._conns.clear()
        if self.rules.mode is Mode.OPEN:
            self._flowing.set()
        else:
            self._flowing.clear()

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for conn in list(self._conns):
            conn.reset()
        self._conns.clear()
        handlers = [h for h in self._handlers if not h.done()]
        for handler in handlers:
            handler.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handler = asyncio.current_task()
        assert handler is not None and self._flowing is not None
        self._handlers.add(handler)
        self.stats.accepted += 1
        conn = _Conn(client=writer)
        try:
            if self.rules.mode is Mode.CUT:
                self.stats.reset += 1
                _reset(writer)
                return
            self._conns.add(conn)
            await self._flowing.wait()  # held: connected upstream only once restored
            if self.rules.mode is Mode.CUT or conn not in self._conns:
                _reset(writer)
                return
            try:
                up_reader, conn.upstream = await asyncio.open_connection(*self.upstream)
            except OSError:
                _reset(writer)  # the service is down: so is the connection through us
                return
            if conn not in self._conns:  # cut while connecting
                conn.reset()
                return
            key = id(conn)
            conn.tasks = [
                asyncio.create_task(self._pump(reader, conn.upstream, (key, "up"), conn)),
                asyncio.create_task(self._pump(up_reader, writer, (key, "down"), conn)),
            ]
            await asyncio.gather(*conn.tasks, return_exceptions=True)
        finally:
            self._conns.discard(conn)
            for direction in ("up", "down"):
                self._last_due.pop((id(conn), direction), None)
            if not writer.transport.is_closing():
                writer.close()
            if conn.upstream is not None and not conn.upstream.transport.is_closing():
                conn.upstream.close()
            self._handlers.discard(handler)

    async def _pump(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        key: tuple[int, str],
        conn: _Conn,
    ) -> None:
        """One direction of one connection: chunks read go into a queue with the time
        they are due (delay and loss), and a writer sends them in order once due and
        while the link flows."""
        queue: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue()
        sender = asyncio.create_task(self._send(queue, writer, key))
        try:
            while True:
                try:
                    data = await reader.read(CHUNK)
                except (ConnectionError, OSError):
                    data = b""
                if not data:
                    queue.put_nowait(None)
                    break
                due = time.monotonic() + self.rules.delay / 2
                if self.rules.loss and self._random.random() < self.rules.loss:
                    self.stats.stalled += 1
                    due += self.rules.stall
                due = max(due, self._last_due.get(key, 0.0))  # TCP keeps the order
                self._last_due[key] = due
                queue.put_nowait((due, data))
            await sender
        finally:
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await sender
            # one side ended: the whole connection ends (as a proxy that relays the close)
            if self.rules.mode is Mode.CUT:
                conn.reset()
            else:
                _close_both(conn)

    async def _send(
        self,
        queue: asyncio.Queue[tuple[float, bytes] | None],
        writer: asyncio.StreamWriter,
        key: tuple[int, str],
    ) -> None:
        assert self._flowing is not None
        while True:
            item = await queue.get()
            if item is None:
                return
            due, data = item
            while True:
                await self._flowing.wait()
                wait = due - time.monotonic()
                if wait <= 0:
                    break
                await asyncio.sleep(wait)
            if self.rules.mode is Mode.CUT:
                return
            writer.write(data)
            if key[1] == "up":
                self.stats.bytes_up += len(data)
                if any(p in data for p in self.rules.hold_after):
                    self.rules.hold_after = ()
                    self.rules.mode = Mode.HELD
                    self._flowing.clear()
            else:
                self.stats.bytes_down += len(data)
            try:
                await writer.drain()
            except (ConnectionError, OSError):
                return


def _close_both(conn: _Conn) -> None:
    for writer in (conn.client, conn.upstream):
        if writer is not None and not writer.transport.is_closing():
            writer.close()
    for task in conn.tasks:
        if task is not asyncio.current_task():
            task.cancel()


class Proxies:
    """The links of one test, on one asyncio loop in one thread (`hosts-proxies-N`)."""

    _count = 0

    def __init__(self) -> None:
        Proxies._count += 1
        self.loop = asyncio.new_event_loop()
        self.made: list[Link] = []
        self.thread = threading.Thread(
            target=self._run, name=f"hosts-proxies-{Proxies._count}", daemon=True
        )
        self.closed = False
        self.thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 10.0) -> T:
        """Run `coro` on the proxies' loop and return its result."""
        assert not self.closed, "the proxies are closed"
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def link(self, name: str, upstream: tuple[str, int]) -> Link:
        """A new link `name` to `upstream` (a service of the test's own)."""
        link = Link(self, name, upstream)
        self.call(link._start())
        self.made.append(link)
        return link

    def close(self) -> None:
        """Close every link (listeners and connections), stop the loop, join the thread."""
        if self.closed:
            return
        try:
            for link in self.made:
                with contextlib.suppress(Exception):
                    self.call(link._close())
            with contextlib.suppress(Exception):
                self.call(self._cancel_the_rest())
        finally:
            self.closed = True
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=10)
            if not self.thread.is_alive():
                self.loop.close()

    async def _cancel_the_rest(self) -> None:
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
