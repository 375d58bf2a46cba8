"""Every trigger rule verdict, including the early decisions Airflow makes."""

from __future__ import annotations

import pytest

from sluice.tasks.trigger_rules import TriggerRule, UpstreamCounts, Verdict, decide

TR = TriggerRule
RUN, WAIT, SKIP, UF = Verdict.RUN, Verdict.WAIT, Verdict.SKIP, Verdict.UPSTREAM_FAILED


def counts(
    total: int, ok: int = 0, sk: int = 0, f: int = 0, uf: int = 0, rm: int = 0
) -> UpstreamCounts:
    return UpstreamCounts(
        total=total,
        success=ok,
        skipped=sk,
        failed=f,
        upstream_failed=uf,
        removed=rm,
        done=ok + sk + f + uf + rm,
    )


@pytest.mark.parametrize("rule", list(TriggerRule))
def test_no_upstream_runs(rule: TriggerRule) -> None:
    assert decide(rule, counts(0)) is RUN
    assert decide(rule, counts(2, rm=2)) is RUN  # removed upstreams are ignored


CASES = [
    # all_success: early UPSTREAM_FAILED / SKIP, failure wins over skip
    (TR.ALL_SUCCESS, counts(3, ok=3), RUN),
    (TR.ALL_SUCCESS, counts(3, ok=2), WAIT),
    (TR.ALL_SUCCESS, counts(3, f=1), UF),
    (TR.ALL_SUCCESS, counts(3, uf=1), UF),
    (TR.ALL_SUCCESS, counts(3, sk=1), SKIP),
    (TR.ALL_SUCCESS, counts(3, sk=1, f=1), UF),
    (TR.ALL_SUCCESS, counts(3, ok=2, rm=1), RUN),
    # all_failed
    (TR.ALL_FAILED, counts(2, f=1, uf=1), RUN),
    (TR.ALL_FAILED, counts(2, f=1), WAIT),
    (TR.ALL_FAILED, counts(3, ok=1), SKIP),
    (TR.ALL_FAILED, counts(3, sk=1), SKIP),
    (TR.ALL_FAILED, counts(2, f=1, rm=1), RUN),
    # all_done
    (TR.ALL_DONE, counts(4, ok=1, sk=1, f=1, uf=1), RUN),
    (TR.ALL_DONE, counts(4, ok=1, sk=1, f=1), WAIT),
    # one_success: early RUN; all done without success
    (TR.ONE_SUCCESS, counts(3, ok=1), RUN),
    (TR.ONE_SUCCESS, counts(3, f=1), WAIT),
    (TR.ONE_SUCCESS, counts(3, f=1, sk=2), UF),
    (TR.ONE_SUCCESS, counts(3, sk=3), SKIP),
    (TR.ONE_SUCCESS, counts(3, sk=2, rm=1), SKIP),
    # one_failed: early RUN; all done without failure
    (TR.ONE_FAILED, counts(3, f=1), RUN),
    (TR.ONE_FAILED, counts(3, uf=1), RUN),
    (TR.ONE_FAILED, counts(3, ok=2), WAIT),
    (TR.ONE_FAILED, counts(3, ok=2, sk=1), SKIP),
    # none_failed
    (TR.NONE_FAILED, counts(3, ok=1, sk=2), RUN),
    (TR.NONE_FAILED, counts(3, sk=3), RUN),
    (TR.NONE_FAILED, counts(3, ok=1), WAIT),
    (TR.NONE_FAILED, counts(3, f=1), UF),
    (TR.NONE_FAILED, counts(3, uf=1), UF),
    # none_failed_min_one_success
    (TR.NONE_FAILED_MIN_ONE_SUCCESS, counts(3, ok=1, sk=2), RUN),
    (TR.NONE_FAILED_MIN_ONE_SUCCESS, counts(3, sk=3), SKIP),
    (TR.NONE_FAILED_MIN_ONE_SUCCESS, counts(3, ok=1), WAIT),
    (TR.NONE_FAILED_MIN_ONE_SUCCESS, counts(3, f=1), UF),
    # none_skipped
    (TR.NONE_SKIPPED, counts(3, ok=2, f=1), RUN),
    (TR.NONE_SKIPPED, counts(3, ok=2), WAIT),
    (TR.NONE_SKIPPED, counts(3, sk=1), SKIP),
    # always
    (TR.ALWAYS, counts(3), RUN),
    (TR.ALWAYS, counts(3, f=3), RUN),
]


@pytest.mark.parametrize(("rule", "upstream", "expected"), CASES)
def test_verdict(rule: TriggerRule, upstream: UpstreamCounts, expected: Verdict) -> None:
    assert decide(rule, upstream) is expected


def test_rules_accept_plain_strings() -> None:
    assert decide("all_done", counts(1, ok=1)) is RUN  # type: ignore[arg-type]
    assert decide("always", counts(1)) is RUN  # type: ignore[arg-type]


def test_counts_are_checked_and_built_from_states() -> None:
    with pytest.raises(ValueError, match="inconsistent"):
        UpstreamCounts(
            total=2, success=1, skipped=0, failed=0, upstream_failed=0, removed=0, done=2
        )
    built = UpstreamCounts.from_states(["success", "skipped", None, "running", "removed"])
    assert built == counts(5, ok=1, sk=1, rm=1)
