"""Self-fencing: a worker process that has not reached the database for `fence_after`
stops what it runs with `FENCED`, once, and never while its beats commit."""

from __future__ import annotations

import threading
import time
from typing import Any

from sluice.broker.worker.heartbeat import FENCED, Beater, Key


class FlakyBeater(Beater):
    """A beater whose beats commit or fail as the test says (no database)."""

    def __init__(self, interval: float, fence_after: float) -> None:
        super().__init__(factory=None, interval=interval, fence_after=fence_after)  # type: ignore[arg-type]
        self.reachable = threading.Event()
        self.reachable.set()

    def beat(self, running: list[tuple[Key, str]]) -> set[Key]:
        if not self.reachable.is_set():
            raise ConnectionError("the database cannot be reached")
        return {key for key, _ in running}


def test_silence_past_fence_after_stops_each_key_once() -> None:
    beater = Beater(factory=None, interval=10.0, fence_after=5.0)  # type: ignore[arg-type]
    stops: list[tuple[str, str]] = []
    beater._since = {("try", 1): 100.0, ("callback", 2): 103.0}
    beater._on_lost = {
        ("try", 1): lambda why: stops.append(("try", why)),
        ("callback", 2): lambda why: stops.append(("callback", why)),
    }
    assert beater.out_of_reach(104.9) == []
    fenced = beater.out_of_reach(105.5)
    assert [(key, round(silent, 1)) for key, silent, _ in fenced] == [(("try", 1), 5.5)]
    assert beater.out_of_reach(106.0) == []  # fenced once
    beater._reached = 107.0  # a beat committed: the clock starts again from it
    assert beater.out_of_reach(111.0) == []
    late = beater.out_of_reach(112.5)
    assert [key for key, _, _ in late] == [("callback", 2)]


def test_a_cut_link_fences_the_running_try_and_a_working_one_never() -> None:
    beater = FlakyBeater(interval=0.05, fence_after=0.4)
    stopped: list[str] = []
    done = threading.Event()

    def on_lost(why: str) -> None:
        stopped.append(why)
        done.set()

    beater.add(("try", 7), "attempt-a", on_lost)
    try:
        time.sleep(1.0)  # beats commit: no fence, however long the try runs
        assert stopped == []
        beater.reachable.clear()  # the link is cut
        cut_at = time.monotonic()
        assert done.wait(3.0)
        waited = time.monotonic() - cut_at
        assert stopped == [FENCED]
        assert 0.25 < waited < 1.5  # after fence_after of silence (from the last beat)
        beater.reachable.set()
        time.sleep(0.3)
        assert stopped == [FENCED]  # once
    finally:
        beater.remove(("try", 7))


def test_without_fence_after_nothing_is_fenced() -> None:
    beater: Any = FlakyBeater(interval=0.05, fence_after=1.0)
    beater._fence_after = None
    stopped: list[str] = []
    beater.add(("try", 8), "attempt-b", stopped.append)
    try:
        beater.reachable.clear()
        time.sleep(0.5)
        assert stopped == []
    finally:
        beater.remove(("try", 8))
