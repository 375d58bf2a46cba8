"""Trigger rules: when a task may run, given the states of its upstream tasks.

``decide(rule, counts)`` is a pure function with Airflow's meaning (``trigger_rule_dep.py``).
Removed upstreams are ignored: they count as neither success nor failure, and the rule is
judged as if the task had ``total - removed`` upstreams. No (effective) upstream → RUN.

``n`` = total - removed, ``done`` = finished upstreams other than removed,
``failed*`` = failed + upstream_failed.

=============================  ============================================================
rule                           verdict (checked top to bottom; otherwise WAIT)
=============================  ============================================================
all_success                    failed* > 0 → UPSTREAM_FAILED; skipped > 0 → SKIP;
                               success == n → RUN
all_failed                     success > 0 or skipped > 0 → SKIP; failed* == n → RUN
all_done                       done == n → RUN
one_success                    success > 0 → RUN; done == n: failed* > 0 → UPSTREAM_FAILED,
                               else SKIP
one_failed                     failed* > 0 → RUN; done == n → SKIP
none_failed                    failed* > 0 → UPSTREAM_FAILED; done == n → RUN
none_failed_min_one_success    failed* > 0 → UPSTREAM_FAILED; done == n: success > 0 → RUN,
                               else SKIP
none_skipped                   skipped > 0 → SKIP; done == n → RUN
always                         RUN
=============================  ============================================================

Early decisions (as Airflow): a verdict other than WAIT may come before every upstream has
finished. ``all_success`` becomes UPSTREAM_FAILED at the first failed upstream and SKIP at
the first skipped one; since a decided task is not decided again, whichever upstream state
the scheduler sees first wins (with both present in one look, failure wins).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum


class TriggerRule(StrEnum):
    """How a task's upstream states decide whether it runs."""

    ALL_SUCCESS = "all_success"
    ALL_FAILED = "all_failed"
    ALL_DONE = "all_done"
    ONE_SUCCESS = "one_success"
    ONE_FAILED = "one_failed"
    NONE_FAILED = "none_failed"
    NONE_FAILED_MIN_ONE_SUCCESS = "none_failed_min_one_success"
    NONE_SKIPPED = "none_skipped"
    ALWAYS = "always"


class Verdict(StrEnum):
    """What the scheduler does with a not-yet-started task."""

    WAIT = "wait"
    RUN = "run"
    SKIP = "skip"
    UPSTREAM_FAILED = "upstream_failed"


@dataclass(frozen=True)
class UpstreamCounts:
    """Counts of a task's direct upstream task instances by state.

    ``done`` counts every finished state: success, skipped, failed, upstream_failed, removed.
    """

    total: int
    success: int
    skipped: int
    failed: int
    upstream_failed: int
    removed: int
    done: int

    def __post_init__(self) -> None:
        parts = (self.success, self.skipped, self.failed, self.upstream_failed, self.removed)
        if min(self.total, self.done, *parts) < 0:
            raise ValueError(f"negative count in {self!r}")
        if sum(parts) != self.done or self.done > self.total:
            raise ValueError(f"inconsistent counts {self!r}: done must be the sum of the finished")

    @classmethod
    def from_states(cls, states: Iterable[str | None]) -> UpstreamCounts:
        """Count upstream task-instance states given as strings (``None``/``"none"``: not run)."""
        tally = Counter(str(s) if s is not None else "none" for s in states)
        keys = ("success", "skipped", "failed", "upstream_failed", "removed")
        success, skipped, failed, upstream_failed, removed = (tally[k] for k in keys)
        return cls(
            total=sum(tally.values()),
            success=success,
            skipped=skipped,
            failed=failed,
            upstream_failed=upstream_failed,
            removed=removed,
            done=success + skipped + failed + upstream_failed + removed,
        )


def decide(rule: TriggerRule, counts: UpstreamCounts) -> Verdict:
    """Decide what happens to a task with trigger ``rule`` given its upstream ``counts``."""
    rule = TriggerRule(rule)
    n = counts.total - counts.removed
    if n <= 0 or rule is TriggerRule.ALWAYS:
        return Verdict.RUN
    done = counts.done - counts.removed
    all_done = done >= n
    failed = counts.failed + counts.upstream_failed
    success, skipped = counts.success, counts.skipped

    match rule:
        case TriggerRule.ALL_SUCCESS:
            if failed:
                return Verdict.UPSTREAM_FAILED
            if skipped:
                return Verdict.SKIP
            return Verdict.RUN if success >= n else Verdict.WAIT
        case TriggerRule.ALL_FAILED:
            if success or skipped:
                return Verdict.SKIP
            return Verdict.RUN if failed >= n else Verdict.WAIT
        case TriggerRule.ALL_DONE:
            return Verdict.RUN if all_done else Verdict.WAIT
        case TriggerRule.ONE_SUCCESS:
            if success:
                return Verdict.RUN
            if all_done:
                return Verdict.UPSTREAM_FAILED if failed else Verdict.SKIP
            return Verdict.WAIT
        case TriggerRule.ONE_FAILED:
            if failed:
                return Verdict.RUN
            return Verdict.SKIP if all_done else Verdict.WAIT
        case TriggerRule.NONE_FAILED:
            if failed:
                return Verdict.UPSTREAM_FAILED
            return Verdict.RUN if all_done else Verdict.WAIT
        case TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS:
            if failed:
                return Verdict.UPSTREAM_FAILED
            if all_done:
                return Verdict.RUN if success else Verdict.SKIP
            return Verdict.WAIT
        case TriggerRule.NONE_SKIPPED:
            if skipped:
                return Verdict.SKIP
            return Verdict.RUN if all_done else Verdict.WAIT
    raise ValueError(f"unknown trigger rule {rule!r}")  # pragma: no cover
