"""Capturing what one try of a task prints and logs, and storing it in `task_log`.

`capture_task_log(ctx, msg, try_number)` is a context manager around the task's
code (see `broker.worker.runner.run_task_instance`). Capture is per thread, so it works
in the prefork pool (one task per process) and in the threads pool (several
tasks at once in threads of one process) alike:

- `sys.stdout` and `sys.stderr` are wrapped, once per process (again if someone
  replaces them), by `ThreadAwareStream`: a write from a capturing thread is
  copied to that thread's capture and still goes to the wrapped stream, so the
  worker's own output is unchanged; other threads' writes only pass through.
- one `CaptureHandler` on the root logger copies the records emitted by a
  capturing thread (except `celery.redirected`, Celery's copy of stdout).
- a thread started by a capturing thread captures into the same log:
  `threading.Thread.start` is wrapped, once per process, to hand the capture on.
  Shell tasks log their output from such reader threads.
- the `sluice.tasks.shell` logger is lowered to INFO if it would drop INFO records:
  shell tasks log each stdout line there at INFO.

Invariants:
- A try keeps at most `max_bytes` of text; the oldest lines are dropped first
  and counted in `dropped_lines`. Text is stored as valid UTF-8 without NULs.
- Each line kept, and what is mirrored to the worker's output, has the deployment's
  secrets masked `***` (`task_env.masker_for`) before it is stored or written, and the
  secrets the try read from the moment it read them (`TaskLogCapture.add_secrets`).
- While the try runs, a thread of the capture (started at the first line, so a
  silent task costs no thread) stores the log every `flush_interval` seconds if it
  changed; when the block exits, `final_snapshot()` gives the last state, which the
  caller stores in the same transaction as the try's result (no extra commit).
- Capturing never fails a task: storage errors go to the worker's own log (never
  to the capture) and the task goes on. Exceptions of the task propagate as is.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TextIO

from sqlalchemy.orm import Session, sessionmaker

from sluice.broker.worker.context import WorkerContext
from sluice.broker.worker.task_env import Masker, masked_forms, masker_for
from sluice.scheduler.core.db import transaction, utcnow
from sluice.scheduler.core.queries.task_logs import LogSnapshot, append_task_log, save_task_log
from sluice.scheduler.core.text import storable
from sluice.tasks import shell

if TYPE_CHECKING:
    from sluice.scheduler.core.messages import RunMessage

log = logging.getLogger(__name__)

MAX_BYTES_PER_TRY = 1024 * 1024
"""Default of `Settings.task_log_max_bytes` (SLUICE_TASK_LOG_MAX_BYTES)."""

MIRROR_BYTES_PER_TRY = 64 * 1024
"""Default of `Settings.task_log_mirror_bytes` (SLUICE_TASK_LOG_MIRROR_BYTES): most bytes
of a try's output also written to the worker's own stdout/stderr (the rest is in the task
log only): a chatty task must not fill the worker's log."""

REWRITE_INTERVAL = 30.0
"""Seconds between two rewrites of a running try's whole log row, once it reached the
cap (below it, each flush appends what is new)."""
"""Most bytes of log text kept per try (the newest lines win)."""

SHELL_LOGGER = shell.log.name
"""The logger shell tasks write their output to (`sluice.tasks.shell`)."""

_IGNORED_LOGGERS = frozenset({"celery.redirected", log.name})
_ATTR = "_sluice_task_log"
"""Attribute of a `threading.Thread` holding the capture it writes to (None: none)."""


_clean = storable
"""A line as storable text (`sluice.scheduler.core.text`)."""


def _stamp(when: float) -> str:
    moment = dt.datetime.fromtimestamp(when, dt.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


class LogBuffer:
    """The newest lines of one try, at most `max_bytes` (UTF-8, newlines included).

    Thread-safe. Stream text is split into lines; a partial line waits for its
    newline (or `close`) unless it alone reaches the cap. A partial line is kept as
    its pieces, joined once when it ends: a task writing one character at a time
    (progress dots) costs time in proportion to what it writes.
    """

    def __init__(
        self, max_bytes: int = MAX_BYTES_PER_TRY, mask: Callable[[str], str] | None = None
    ) -> None:
        if max_bytes < 64:
            raise ValueError("max_bytes must be at least 64")
        self.max_bytes = max_bytes
        self.mask = mask
        """Applied to each line as it is added (the secrets masked)."""
        self._lines: deque[tuple[str, int]] = deque()
        self._size = 0
        self._dropped = 0
        self._partial: dict[str, list[str]] = {}
        self._partial_bytes: dict[str, int] = {}
        self._lock = threading.Lock()
        self.version = 0
        """Bumped by every change: a writer stores only when it moved."""
        self._new: list[str] = []
        """Lines added since `take_new`, unless lines were dropped meanwhile."""
        self._dropped_since = False

    def write(self, source: str, text: str, when: float | None = None) -> None:
        """Text written to stream `source` (`stdout`/`stderr`)."""
        if not text:
            return
        when = time.time() if when is None else when
        with self._lock:
            pieces = self._partial.setdefault(source, [])
            if "\n" not in text:
                pieces.append(text)
                size = self._partial_bytes.get(source, 0) + len(text.encode("utf-8", "replace"))
                self._partial_bytes[source] = size
                if size >= self.max_bytes:
                    self._end_partial(source, when)
                return
            head, *complete, rest = text.split("\n")
            pieces.append(head)
            self._end_partial(source, when)
            for line in complete:
                self._add(f"{_stamp(when)} [{source}] {line}")
            if rest:
                self._partial[source] = [rest]
                self._partial_bytes[source] = len(rest.encode("utf-8", "replace"))
                if self._partial_bytes[source] >= self.max_bytes:
                    self._end_partial(source, when)

    def _end_partial(self, source: str, when: float) -> None:
        pieces = self._partial.pop(source, [])
        self._partial_bytes.pop(source, None)
        self._add(f"{_stamp(when)} [{source}] {''.join(pieces)}")

    def add_record(self, text: str, when: float) -> None:
        """A formatted logging record; its continuation lines (a traceback) follow it."""
        first, *more = text.split("\n")
        with self._lock:
            self._add(f"{_stamp(when)} {first}")
            for line in more:
                self._add(line)

    def close(self) -> None:
        """End the partial lines: they are kept as lines of their own."""
        when = time.time()
        with self._lock:
            for source in sorted(self._partial):
                if any(self._partial[source]):
                    self._end_partial(source, when)
            self._partial.clear()
            self._partial_bytes.clear()

    def snapshot(self) -> tuple[str, int, int]:
        """(text, lines dropped so far, version)."""
        with self._lock:
            return "\n".join(line for line, _ in self._lines), self._dropped, self.version

    def overflowed(self) -> bool:
        """Lines were dropped since the last `take`."""
        with self._lock:
            return self._dropped_since

    def take(self, whole: bool) -> tuple[str, bool, int, int]:
        """What a writer stores, taken at one moment: the lines added since the last
        call (to append to what was stored then) or, with `whole` or when lines were
        dropped meanwhile, the whole text; as (text, whole?, lines dropped, version)."""
        with self._lock:
            whole = whole or self._dropped_since
            lines = (line for line, _ in self._lines) if whole else self._new
            text = "\n".join(lines)
            self._new, self._dropped_since = [], False
            return text, whole, self._dropped, self.version

    def _add(self, line: str) -> None:
        line = _clean(line if self.mask is None else self.mask(line))
        size = len(line.encode("utf-8")) + 1
        if size > self.max_bytes:
            line = line.encode("utf-8")[: self.max_bytes - 1].decode("utf-8", "ignore")
            size = len(line.encode("utf-8")) + 1
        self._lines.append((line, size))
        self._new.append(line)
        self._size += size
        while self._size > self.max_bytes:
            _, old = self._lines.popleft()
            self._size -= old
            self._dropped += 1
            self._dropped_since = True
        self.version += 1


class TaskLogCapture:
    """Captures the current thread (and the threads it starts) into one try's log row.

    A context manager; enter and exit it in the thread that runs the task.
    """

    def __init__(
        self,
        factory: sessionmaker[Session],
        *,
        ti_id: int,
        try_number: int,
        attempt_id: str | None,
        hostname: str | None,
        max_bytes: int = MAX_BYTES_PER_TRY,
        mirror_bytes: int = MIRROR_BYTES_PER_TRY,
        flush_interval: float = 2.0,
        mask: Callable[[str], str] | None = None,
    ) -> None:
        self.factory = factory
        self.ti_id = ti_id
        self.try_number = try_number
        self.attempt_id = attempt_id
        self.hostname = hostname
        self.buffer = LogBuffer(max_bytes, mask)
        self.mask = mask
        self.flush_interval = flush_interval
        self.closed = False
        self.started_at = utcnow()
        self._stored_version = -1
        self._stored_lines = False
        """The stored row holds at least one line (an append then starts with a newline)."""
        self._rewrite = True
        """What is stored must be replaced whole (no row yet, lines dropped, a failed append)."""
        self._last_rewrite = 0.0
        self.mirror_bytes = mirror_bytes
        self._mirror_left = mirror_bytes
        self._finished = False
        self._write_lock = threading.Lock()
        self._stop = threading.Event()
        self._previous: Any = None
        self._flusher: threading.Thread | None = None
        self._mask_lock = threading.Lock()

    def add_secrets(self, values: Iterable[str]) -> None:
        """Mask `values` too, in each form a log may show them (`task_env.masked_forms`),
        in every line this try writes from now on, in what it mirrors and in its error
        (`mask`): the secrets the try read (`secret_reads`)."""
        forms = masked_forms(values)
        if not forms:
            return
        with self._mask_lock:
            mask = self.mask
            if isinstance(mask, Masker):
                new: Callable[[str], str] = mask.with_(forms)
            else:
                extra = Masker(forms)
                new = extra if mask is None else functools.partial(_both, mask, extra)
            self.mask = self.buffer.mask = new

    # -- what the proxies and the handler call -------------------------------------------
    def write(self, source: str, text: str) -> None:
        self.buffer.write(source, text)
        self._start_flusher()

    def mirrored(self, text: str) -> str:
        """The part of `text` to copy to the worker's own stream: the try's first
        `mirror_bytes` bytes, then one line saying where the rest is."""
        if self._mirror_left <= 0:
            return ""
        if self.mask is not None:
            text = self.mask(text)
        size = len(text.encode("utf-8", "replace"))
        self._mirror_left -= size
        if self._mirror_left >= 0:
            return text
        return text[: max(0, len(text) + self._mirror_left)] + (
            f"\n[sluice] ti {self.ti_id} try {self.try_number} printed more than "
            f"{self.mirror_bytes} bytes (SLUICE_TASK_LOG_MIRROR_BYTES): the rest is in its "
            "task log only (sluice tasks logs)\n"
        )

    def add_record(self, text: str, when: float) -> None:
        self.buffer.add_record(text, when)
        self._start_flusher()

    def _start_flusher(self) -> None:
        if self._flusher is not None or self.closed:
            return
        with self._write_lock:
            if self._flusher is not None or self.closed:
                return
            flusher = threading.Thread(
                target=self._flush_loop, name=f"sluice-task-log-{self.ti_id}", daemon=True
            )
            setattr(flusher, _ATTR, None)  # the flusher's own warnings are not the task's
            flusher.start()
            self._flusher = flusher

    # -- context manager -----------------------------------------------------------------
    def __enter__(self) -> TaskLogCapture:
        install()
        thread = threading.current_thread()
        self._previous = getattr(thread, _ATTR, None)
        self.started_at = utcnow()
        setattr(thread, _ATTR, self)
        return self

    def __exit__(self, *exc_info: object) -> None:
        setattr(threading.current_thread(), _ATTR, self._previous)
        with self._write_lock:
            self.closed = True
        self._stop.set()
        if self._flusher is not None:
            self._flusher.join(timeout=5.0)
        self.buffer.close()

    def final_snapshot(self) -> LogSnapshot | None:
        """The finished log to store with the try's result; None if the try wrote nothing."""
        with self._write_lock:
            content, dropped, version = self.buffer.snapshot()
            if self._stored_version < 0 and not content and not dropped:
                return None
            self._finished = True
            return self._snapshot(content, dropped, finished=True)

    # -- storing -------------------------------------------------------------------------
    def _flush_loop(self) -> None:
        while not self._stop.wait(self.flush_interval):
            self.store(finished=False)

    def store(self, *, finished: bool) -> bool:
        """Write the log row if it changed (always when `finished`); False if that failed.

        While the try runs, new lines are appended to the stored row; the row is
        replaced whole when it has none yet, when lines were dropped (the cap reached;
        then at most every REWRITE_INTERVAL seconds) and when `finished`."""
        with self._write_lock:
            if self._finished:
                return True
            if not finished and self.buffer.version == self._stored_version:
                return True
            now = time.monotonic()
            replace = self._rewrite or self.buffer.overflowed()
            recent = now - self._last_rewrite < REWRITE_INTERVAL
            if not finished and replace and self._stored_version >= 0 and recent:
                return True  # over the cap: replaced whole, but not at every flush
            text, whole, dropped, version = self.buffer.take(self._rewrite or finished)
            if whole:
                stored = self._replace(text, dropped, finished)
            else:
                stored = self._append(text, dropped)
            if not stored:
                self._rewrite = True  # what was taken is not stored: replace it next time
                return False
            if whole:
                self._last_rewrite = now
            self._rewrite = False
            self._stored_version = version
            self._finished = finished
            return True

    def _append(self, new: str, dropped: int) -> bool:
        if not new:
            return True
        text = f"\n{new}" if self._stored_lines else new
        try:
            with transaction(self.factory) as session:
                appended = append_task_log(
                    session,
                    ti_id=self.ti_id,
                    try_number=self.try_number,
                    text=text,
                    dropped_lines=dropped,
                    now=utcnow(),
                )
        except Exception as exc:
            log.warning("log of ti %s try %s not stored: %s", *self._key(), exc)
            return False
        self._stored_lines = self._stored_lines or appended
        return appended

    def _replace(self, content: str, dropped: int, finished: bool) -> bool:
        snapshot = self._snapshot(content, dropped, finished=finished)
        for attempt in (1, 2):
            try:
                with transaction(self.factory) as session:
                    save_task_log(session, snapshot, now=utcnow())
            except Exception as exc:
                if attempt == 2 or not finished:
                    log.warning("log of ti %s try %s not stored: %s", *self._key(), exc)
                    return False
                time.sleep(0.2)
                continue
            break
        self._stored_lines = bool(content)
        return True

    def _snapshot(self, content: str, dropped: int, *, finished: bool) -> LogSnapshot:
        return LogSnapshot(
            ti_id=self.ti_id,
            try_number=self.try_number,
            attempt_id=self.attempt_id,
            hostname=self.hostname,
            content=content,
            dropped_lines=dropped,
            started_at=self.started_at,
            finished_at=utcnow() if finished else None,
        )

    def _key(self) -> tuple[int, int]:
        return self.ti_id, self.try_number


def _both(first: Callable[[str], str], then: Callable[[str], str], text: str) -> str:
    return then(first(text))


def capture_task_log(ctx: WorkerContext, msg: RunMessage, try_number: int) -> TaskLogCapture:
    """The capture of one claimed try, stored through the worker's session factory."""
    return TaskLogCapture(
        ctx.session_factory,
        ti_id=msg.ti_id,
        try_number=try_number,
        attempt_id=msg.attempt_id,
        hostname=ctx.hostname,
        max_bytes=ctx.settings.task_log_max_bytes,
        mirror_bytes=ctx.settings.task_log_mirror_bytes,
        flush_interval=ctx.settings.heartbeat_interval,
        mask=masker_for(ctx.settings),
    )


def current_capture() -> TaskLogCapture | None:
    """The open capture of the calling thread, if any."""
    capture = getattr(threading.current_thread(), _ATTR, None)
    if capture is None or capture.closed:
        return None
    return capture


class ThreadAwareStream:
    """Wraps `sys.stdout`/`sys.stderr`: copies a capturing thread's writes to its capture."""

    def __init__(self, target: TextIO, source: str) -> None:
        self._target = target
        self._source = source

    @property
    def wrapped(self) -> TextIO:
        return self._target

    def write(self, text: str) -> int:
        capture = current_capture()
        if capture is not None and isinstance(text, str):
            capture.write(self._source, text)
            mirrored = capture.mirrored(text)
            if mirrored:
                self._target.write(mirrored)
            return len(text)
        return self._target.write(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        self._target.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)


class CaptureHandler(logging.Handler):
    """Copies log records emitted by a capturing thread into its capture."""

    def __init__(self) -> None:
        super().__init__(logging.NOTSET)
        self.setFormatter(logging.Formatter("[%(levelname)s %(name)s] %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        capture = current_capture()
        if capture is None or record.name in _IGNORED_LOGGERS:
            return
        try:
            capture.add_record(self.format(record), record.created)
        except Exception:
            self.handleError(record)


_HANDLER = CaptureHandler()
_install_lock = threading.Lock()
_original_start: Callable[..., None] | None = None


def install() -> None:
    """Put the stream proxies, the handler and the thread hook in place (idempotent)."""
    global _original_start
    with _install_lock:
        for name in ("stdout", "stderr"):
            stream = getattr(sys, name)
            if stream is not None and not isinstance(stream, ThreadAwareStream):
                setattr(sys, name, ThreadAwareStream(stream, name))
        root = logging.getLogger()
        if _HANDLER not in root.handlers:
            root.addHandler(_HANDLER)
        shell = logging.getLogger(SHELL_LOGGER)
        if shell.getEffectiveLevel() > logging.INFO:
            shell.setLevel(logging.INFO)
        if _original_start is None:
            _original_start = threading.Thread.start
            threading.Thread.start = _inheriting_start(_original_start)  # type: ignore[method-assign]


def _inheriting_start(original: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(original)
    def start(self: threading.Thread) -> None:
        if _ATTR not in self.__dict__:
            capture = getattr(threading.current_thread(), _ATTR, None)
            if capture is not None:
                setattr(self, _ATTR, capture)
        original(self)

    return start
