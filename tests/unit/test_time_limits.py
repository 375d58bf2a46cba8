"""Hard time limits (`broker.worker.time_limits`, issue 39, 4.3): a body still running at
its deadline has its end recorded once, and is killed in a prefork pool child or
abandoned elsewhere; a body that ends in time is never touched."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from sluice.broker.worker.time_limits import Ending, Expired, hard_limit, mark_pool_child
from tests.procs import wait_until


def test_a_body_that_ends_in_time_is_never_expired() -> None:
    ended: list[Ending] = []
    with hard_limit(0.2, ended.append, "quick body"):
        pass
    time.sleep(0.4)  # past the deadline: nothing fires (a wait for "nothing" has no until)
    assert ended == []


def test_an_overdue_body_outside_a_pool_child_is_recorded_once_and_abandoned() -> None:
    """The threads pool, the solo pool, a local run: the end is recorded while the body
    runs on, and the body's own end, when it comes, raises `Expired` (nothing to record)."""
    ended: list[Ending] = []
    started = time.monotonic()
    with pytest.raises(Expired), hard_limit(0.2, ended.append, "stubborn body"):
        wait_until(lambda: ended, timeout=5, every=0.01)
        assert time.monotonic() - started >= 0.2
    assert ended == [Ending.ABANDONED]


def test_the_body_waits_while_its_end_is_recorded() -> None:
    """`expire` and the body's end exclude each other: a body that ends while `expire`
    records waits for it, then learns that its end was taken."""
    recording, release = threading.Event(), threading.Event()
    order: list[str] = []

    def expire(how: Ending) -> None:
        recording.set()
        release.wait(5)
        order.append("recorded")

    def body_ends() -> None:
        try:
            with hard_limit(0.1, expire, "body"):
                recording.wait(5)
        except Expired:
            order.append("body saw it expired")

    thread = threading.Thread(target=body_ends)
    thread.start()
    recording.wait(5)
    threading.Timer(0.2, release.set).start()
    thread.join(5)
    assert order == ["recorded", "body saw it expired"]


def _overdue_in_a_pool_child(marks: str) -> None:
    mark_pool_child()

    def expire(how: Ending) -> None:
        Path(marks, "recorded").write_text(how.note)

    with hard_limit(0.2, expire, "try 1 of TI 7"):
        for _ in range(1000):  # swallows everything, as a hostile task does
            try:
                time.sleep(0.01)
            except BaseException:  # noqa: BLE001, S112
                continue
    Path(marks, "returned").write_text("")


def test_an_overdue_body_in_a_pool_child_is_recorded_then_killed(tmp_path: Path) -> None:
    child = multiprocessing.get_context("fork").Process(
        target=_overdue_in_a_pool_child, args=(str(tmp_path),)
    )
    child.start()
    child.join(5)
    if child.is_alive():
        os.kill(child.pid or 0, signal.SIGKILL)
        child.join(5)
        raise AssertionError("the overdue body was not killed")
    assert child.exitcode == -signal.SIGKILL
    assert (tmp_path / "recorded").read_text() == "killed"
    assert not (tmp_path / "returned").exists()
