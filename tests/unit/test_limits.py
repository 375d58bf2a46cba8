"""Limits across runs (`sluice.Concurrency`, `sluice.RateLimit`) without a database:
their definition checks (one line each), the key a worker computes, their JSON form (only
when set), the token buckets' arithmetic and a scheduler pass's booking of slots and
tokens (`decide.limited.Limits`)."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

import sluice
from sluice import DAG, DagDefinitionError, task
from sluice.scheduler.core.queries.limits import Bucket, refilled
from sluice.scheduler.decide.limited import Limits
from sluice.tasks.limits import (
    KEY_MAX,
    LIMIT_MAX,
    NAME_MAX,
    Concurrency,
    RateLimit,
    concurrency_key,
)
from sluice.tasks.serialize import serialize_dag, version_hash

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def by_customer(context: Any) -> Any:
    return context["params"]["customer"]


def refused(make: Callable[[], object], *needles: str) -> str:
    """The one-line message `make()` is refused with, holding every one of `needles`."""
    with pytest.raises(DagDefinitionError) as caught:
        make()
    message = str(caught.value)
    assert message and "\n" not in message and "\r" not in message, repr(message)
    for needle in needles:
        assert needle in message, message
    return message


def test_both_are_exported_from_sluice() -> None:
    assert sluice.Concurrency is Concurrency and sluice.RateLimit is RateLimit
    assert {"Concurrency", "RateLimit"} <= set(sluice.__all__)


# -- definition checks ---------------------------------------------------------------


BAD_NAMES = [
    pytest.param("", id="empty"),
    pytest.param(" api", id="leading-space"),
    pytest.param("api ", id="trailing-space"),
    pytest.param("api\n", id="trailing-newline"),
    pytest.param("x" * (NAME_MAX + 1), id="too-long"),
    pytest.param("a\nb", id="newline"),
    pytest.param("a\x00b", id="nul"),
    pytest.param("a\x1bb", id="escape"),
    pytest.param("a\x7fb", id="del"),
    pytest.param(42, id="int"),
    pytest.param(None, id="none"),
]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_a_bad_name_is_refused_in_one_line(name: Any) -> None:
    refused(lambda: Concurrency(name, key=by_customer, limit=2), "Concurrency", "name")
    refused(lambda: RateLimit(name, 10), "RateLimit", "name")


def test_a_name_of_the_longest_length_and_inner_spaces_are_accepted() -> None:
    longest = "x" * NAME_MAX
    assert Concurrency(longest, key=by_customer).name == longest
    assert RateLimit(longest, 1).name == longest
    assert Concurrency("per customer", key=by_customer).name == "per customer"
    assert RateLimit("é-api", 1).name == "é-api"


def test_a_too_long_name_says_the_limit() -> None:
    refused(lambda: RateLimit("x" * 251, 1), f"at most {NAME_MAX} characters")


BAD_LIMITS = [
    pytest.param(0, id="zero"),
    pytest.param(-1, id="negative"),
    pytest.param(True, id="bool"),
    pytest.param(False, id="false"),
    pytest.param("2", id="str"),
    pytest.param(2.0, id="float"),
    pytest.param(None, id="none"),
    pytest.param(LIMIT_MAX + 1, id="over-a-million"),
]


@pytest.mark.parametrize("limit", BAD_LIMITS)
def test_a_bad_limit_is_refused_in_one_line_naming_the_limit(limit: Any) -> None:
    message = refused(
        lambda: Concurrency("per_customer", key=by_customer, limit=limit), "'per_customer'"
    )
    assert "limit must be an int from 1 to 1000000" in message, message
    assert repr(limit) in message, message
    message = refused(lambda: RateLimit("openai", limit), "'openai'")
    assert "limit must be an int from 1 to 1000000" in message, message


def test_the_limits_at_the_ends_are_accepted_and_concurrency_defaults_to_one() -> None:
    assert Concurrency("c", key=by_customer, limit=1).limit == 1
    assert Concurrency("c", key=by_customer, limit=LIMIT_MAX).limit == LIMIT_MAX
    assert RateLimit("r", 1).limit == 1 and RateLimit("r", LIMIT_MAX).limit == LIMIT_MAX
    assert Concurrency("c", key=by_customer).limit == 1


@pytest.mark.parametrize("key", [1, "customer", None, ["customer"]])
def test_a_key_that_is_not_callable_is_refused(key: Any) -> None:
    refused(lambda: Concurrency("per_customer", key=key, limit=2), "key must be a callable")


@pytest.mark.parametrize(
    "per",
    [
        pytest.param(dt.timedelta(0), id="zero"),
        pytest.param(0, id="zero-seconds"),
        pytest.param(0.0, id="zero-float"),
        pytest.param(dt.timedelta(seconds=-1), id="negative"),
        pytest.param(-5, id="negative-seconds"),
        pytest.param(dt.timedelta(days=1, microseconds=1), id="over-a-day"),
        pytest.param(dt.timedelta(days=2), id="two-days"),
        pytest.param(86_401, id="over-a-day-in-seconds"),
        pytest.param(True, id="bool"),
        pytest.param("1s", id="str"),
        pytest.param(None, id="none"),
    ],
)
def test_a_bad_period_is_refused_in_one_line(per: Any) -> None:
    refused(
        lambda: RateLimit("openai", 10, per=per),
        "RateLimit 'openai'",
        "per must be a timedelta above 0 and at most 1 day",
    )


@pytest.mark.parametrize(
    ("per", "expected"),
    [
        (dt.timedelta(seconds=1), dt.timedelta(seconds=1)),
        (dt.timedelta(days=1), dt.timedelta(days=1)),
        (2, dt.timedelta(seconds=2)),
        (0.5, dt.timedelta(milliseconds=500)),
        (86_400, dt.timedelta(days=1)),
    ],
)
def test_a_period_may_be_a_timedelta_or_seconds(per: Any, expected: dt.timedelta) -> None:
    limit = RateLimit("openai", 10, per=per)
    assert limit.per == expected and isinstance(limit.per, dt.timedelta)


def test_the_period_defaults_to_one_second() -> None:
    assert RateLimit("openai", 10).per == dt.timedelta(seconds=1)


@pytest.mark.parametrize("per", [float("nan"), float("inf"), 1e20])
def test_a_period_that_is_no_finite_number_is_a_definition_error(per: Any) -> None:
    refused(lambda: RateLimit("openai", 10, per=per), "per must be")


def test_task_options_must_be_the_right_kind_named_by_task() -> None:
    with DAG("limits_kinds", schedule=None):
        message = refused(
            lambda: task(task_id="work", concurrency=object())(lambda: 1),
            "task 'work'",
            "concurrency must be a sluice.Concurrency",
        )
        assert "object object" in message
        refused(
            lambda: task(task_id="call", rate_limit="x")(lambda: 1),
            "task 'call'",
            "rate_limit must be a sluice.RateLimit, got 'x'",
        )
        # swapped: a RateLimit is no Concurrency, nor the other way round
        refused(
            lambda: task(task_id="swapped", concurrency=RateLimit("r", 1))(lambda: 1),
            "concurrency must be a sluice.Concurrency",
        )
        refused(
            lambda: task(task_id="swapped2", rate_limit=Concurrency("c", key=str))(lambda: 1),
            "rate_limit must be a sluice.RateLimit",
        )


def test_default_args_limits_are_checked_and_given_to_every_task() -> None:
    shared = RateLimit("api", 5)
    with DAG("limits_defaults", schedule=None, default_args={"rate_limit": shared}) as dag:
        task(task_id="a")(lambda: 1)
        task(task_id="b", rate_limit=None)(lambda: 1)
    assert dag.tasks["a"].rate_limit is shared
    assert dag.tasks["b"].rate_limit is None
    with DAG("limits_bad_defaults", schedule=None, default_args={"concurrency": "per_customer"}):
        refused(lambda: task(task_id="a")(lambda: 1), "task 'a'", "concurrency must be")


# -- the key a worker computes -------------------------------------------------------


PER_CUSTOMER = Concurrency("per_customer", key=by_customer, limit=2)


def key_of(value: Any) -> str:
    return concurrency_key(PER_CUSTOMER, {"params": {"customer": value}})


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("acme", "acme"),
        ("a b", "a b"),
        ("é" * KEY_MAX, "é" * KEY_MAX),
        ("x", "x"),
        (7, "7"),
        (0, "0"),
        (-3, "-3"),
        (10**249, "1" + "0" * 249),
    ],
)
def test_a_key_is_text_or_an_int_given_as_text(value: Any, expected: str) -> None:
    assert key_of(value) == expected


def test_the_key_function_gets_the_context() -> None:
    seen: list[Any] = []

    def key(context: Any) -> str:
        seen.append(context)
        return "k"

    context = {"params": {}, "run_id": "r1"}
    assert concurrency_key(Concurrency("c", key=key), context) == "k"
    assert seen == [context]


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        (True, "text or an int, got bool"),
        (False, "text or an int, got bool"),
        (None, "text or an int, got NoneType"),
        ({"customer": "acme"}, "text or an int, got dict"),
        (["acme"], "text or an int, got list"),
        (1.5, "text or an int, got float"),
        (b"acme", "text or an int, got bytes"),
        ("", "1 to 250 characters, got 0"),
        ("x" * (KEY_MAX + 1), "1 to 250 characters, got 251"),
        (10**250, "1 to 250 characters, got 251"),
        ("acme\n", "control characters"),
        ("a\tb", "control characters"),
        ("a\x00b", "control characters"),
        ("\x1b[31mred", "control characters"),
        ("a\x7f", "control characters"),
    ],
)
def test_a_bad_key_is_a_value_error_in_one_line(value: Any, needle: str) -> None:
    with pytest.raises(ValueError) as caught:
        key_of(value)
    message = str(caught.value)
    assert "\n" not in message and "\r" not in message, repr(message)
    assert message.startswith("Concurrency 'per_customer': key must "), message
    assert needle in message, message
    if isinstance(value, str) and value:
        assert value not in message  # the user's bad key is not echoed raw


def test_a_key_function_that_raises_lets_its_error_through() -> None:
    with pytest.raises(KeyError, match="customer"):
        concurrency_key(PER_CUSTOMER, {"params": {}})


# -- the JSON form -------------------------------------------------------------------


def a_dag(dag_id: str = "limited", **options: Any) -> DAG:
    with DAG(dag_id, schedule=None) as dag:

        @task(**options)
        def first() -> int:
            return 1

        @task
        def second() -> int:
            return 2

        first >> second
    return dag


def test_a_dag_without_limits_has_neither_field_in_any_task() -> None:
    spec = serialize_dag(a_dag())
    for task_spec in spec["tasks"].values():
        assert "concurrency" not in task_spec and "rate_limit" not in task_spec, task_spec
    # and its version hash does not move with the option being there but unset
    unset = a_dag(concurrency=None, rate_limit=None)
    assert version_hash(serialize_dag(unset)) == version_hash(spec)


def test_limits_are_serialized_only_on_the_tasks_that_set_them() -> None:
    dag = a_dag(
        concurrency=Concurrency("per_customer", key=by_customer, limit=2),
        rate_limit=RateLimit("openai", 10, per=dt.timedelta(minutes=1)),
    )
    tasks = serialize_dag(dag)["tasks"]
    assert tasks["first"]["concurrency"] == {"name": "per_customer", "limit": 2}
    assert tasks["first"]["rate_limit"] == {"name": "openai", "limit": 10, "per": 60.0}
    assert "concurrency" not in tasks["second"] and "rate_limit" not in tasks["second"]
    # one without the other
    half_a_second: Any = 0.5  # seconds (accepted, though `per` is typed as a timedelta)
    spec = serialize_dag(a_dag(rate_limit=RateLimit("openai", 3, per=half_a_second)))
    only_rate = spec["tasks"]
    assert "concurrency" not in only_rate["first"]
    assert only_rate["first"]["rate_limit"] == {"name": "openai", "limit": 3, "per": 0.5}


def test_a_limit_set_or_changed_is_a_new_version() -> None:
    def hash_of(**options: Any) -> str:
        return version_hash(serialize_dag(a_dag(**options)))

    plain = hash_of()
    keyed = hash_of(concurrency=Concurrency("c", key=by_customer, limit=2))
    wider = hash_of(concurrency=Concurrency("c", key=by_customer, limit=3))
    rated = hash_of(rate_limit=RateLimit("r", 2))
    slower = hash_of(rate_limit=RateLimit("r", 2, per=dt.timedelta(seconds=2)))
    assert len({plain, keyed, wider, rated, slower}) == 5
    # the key function is code: defined again, the same version
    assert hash_of(concurrency=Concurrency("c", key=lambda c: c["run_id"], limit=2)) == keyed


# -- token buckets -------------------------------------------------------------------


def bucket_row(tokens: float, at: dt.datetime, amount: int = 10, per_seconds: float = 1.0) -> Any:
    return SimpleNamespace(
        name="api", amount=amount, per_seconds=per_seconds, tokens=tokens, refilled_at=at
    )


def test_a_bucket_refills_at_its_amount_per_period() -> None:
    row = bucket_row(0.0, T0, amount=10, per_seconds=2.0)  # 5 tokens a second
    assert refilled(row, T0).tokens == 0.0
    assert refilled(row, T0 + dt.timedelta(seconds=1)).tokens == pytest.approx(5.0)
    assert refilled(row, T0 + dt.timedelta(milliseconds=300)).tokens == pytest.approx(1.5)
    slow = bucket_row(0.0, T0, amount=1, per_seconds=60.0)
    assert refilled(slow, T0 + dt.timedelta(seconds=30)).tokens == pytest.approx(0.5)
    # the row itself is not changed: only the bucket returned
    assert row.tokens == 0.0 and row.refilled_at == T0


def test_a_bucket_is_capped_at_its_amount() -> None:
    row = bucket_row(3.0, T0, amount=10, per_seconds=1.0)
    assert refilled(row, T0 + dt.timedelta(hours=5)).tokens == 10.0
    assert refilled(row, T0 + dt.timedelta(seconds=0.7)).tokens == pytest.approx(10.0)
    full = bucket_row(10.0, T0)
    assert refilled(full, T0 + dt.timedelta(seconds=1)).tokens == 10.0


def test_a_clock_gone_back_takes_nothing_away() -> None:
    row = bucket_row(4.0, T0)
    assert refilled(row, T0 - dt.timedelta(seconds=30)).tokens == 4.0


def test_a_refilled_bucket_carries_the_rows_definition() -> None:
    bucket = refilled(bucket_row(1.0, T0, amount=7, per_seconds=3.0), T0)
    assert bucket == Bucket("api", 7, 3.0, 1.0)


def test_take_needs_a_whole_token() -> None:
    bucket = Bucket("api", 2, 1.0, 2.0)
    assert bucket.take() and bucket.take()
    assert bucket.tokens == 0.0
    assert not bucket.take() and bucket.tokens == 0.0
    almost = Bucket("api", 2, 1.0, 0.999)
    assert not almost.take() and almost.tokens == 0.999
    one = Bucket("api", 2, 1.0, 1.0)
    assert one.take() and one.tokens == 0.0


def test_next_token_in_is_the_time_to_a_whole_token() -> None:
    assert Bucket("api", 5, 1.0, 3.0).next_token_in() == 0.0
    assert Bucket("api", 5, 1.0, 1.0).next_token_in() == 0.0
    assert Bucket("api", 5, 1.0, 0.0).next_token_in() == pytest.approx(0.2)
    assert Bucket("api", 1, 60.0, 0.0).next_token_in() == pytest.approx(60.0)
    assert Bucket("api", 1, 60.0, 0.75).next_token_in() == pytest.approx(15.0)
    assert Bucket("api", 10, 2.0, 0.5).next_token_in() == pytest.approx(0.1)


def test_next_token_in_agrees_with_refilled() -> None:
    row = bucket_row(0.25, T0, amount=3, per_seconds=7.0)
    wait = refilled(row, T0).next_token_in()
    later = refilled(row, T0 + dt.timedelta(seconds=wait))
    assert later.tokens == pytest.approx(1.0) and later.take()
    assert not refilled(row, T0 + dt.timedelta(seconds=wait * 0.99)).take()


# -- a scheduler pass's booking --------------------------------------------------------


def ti_row(
    concurrency: str | None = None,
    key: str | None = None,
    limit: int | None = None,
    rate_limit: str | None = None,
    ti_id: int = 1,
) -> Any:
    return SimpleNamespace(
        id=ti_id,
        concurrency=concurrency,
        concurrency_key=key,
        concurrency_limit=limit,
        rate_limit=rate_limit,
    )


def test_a_key_takes_slots_up_to_its_limit() -> None:
    limits = Limits(used={("per_customer", "acme"): 1})
    acme = ti_row("per_customer", "acme", limit=2)
    assert limits.take(acme)
    assert limits.used[("per_customer", "acme")] == 2
    assert not limits.take(acme)  # at its limit
    assert limits.used[("per_customer", "acme")] == 2
    # another key of the same name has its own slots
    assert limits.take(ti_row("per_customer", "globex", limit=2))
    assert limits.used[("per_customer", "globex")] == 1
    # a key's limit comes from its row
    assert not Limits(used={("c", "k"): 3}).take(ti_row("c", "k", limit=3))
    assert Limits(used={("c", "k"): 3}).take(ti_row("c", "k", limit=4))


def test_a_key_without_a_limit_has_one_slot() -> None:
    limits = Limits()
    assert limits.take(ti_row("c", "k", limit=None))
    assert not limits.take(ti_row("c", "k", limit=None))


def test_a_row_whose_key_is_unknown_takes_no_slot() -> None:
    limits = Limits(used={("c", "k"): 5})
    assert limits.take(ti_row("c", None, limit=1))  # its worker computes the key
    assert limits.take(ti_row(None, None))
    assert limits.used == {("c", "k"): 5}


def test_a_bucket_with_less_than_a_token_refuses_and_books_no_slot() -> None:
    limits = Limits(buckets={"openai": Bucket("openai", 10, 1.0, 0.5)})
    row = ti_row("per_customer", "acme", limit=2, rate_limit="openai")
    assert not limits.take(row)
    assert limits.used.get(("per_customer", "acme"), 0) == 0  # nothing booked
    assert limits.buckets["openai"].tokens == 0.5


def test_a_key_at_its_limit_takes_no_token() -> None:
    limits = Limits(
        used={("per_customer", "acme"): 2}, buckets={"openai": Bucket("openai", 10, 1.0, 3.0)}
    )
    assert not limits.take(ti_row("per_customer", "acme", limit=2, rate_limit="openai"))
    assert limits.buckets["openai"].tokens == 3.0


def test_take_books_both_and_give_back_restores_both() -> None:
    limits = Limits(
        used={("per_customer", "acme"): 1}, buckets={"openai": Bucket("openai", 10, 1.0, 1.5)}
    )
    row = ti_row("per_customer", "acme", limit=2, rate_limit="openai")
    assert limits.take(row)
    assert limits.used[("per_customer", "acme")] == 2
    assert limits.buckets["openai"].tokens == pytest.approx(0.5)
    assert not limits.take(row)  # both are spent now
    limits.give_back(row)  # its pool refused it
    assert limits.used[("per_customer", "acme")] == 1
    assert limits.buckets["openai"].tokens == pytest.approx(1.5)
    assert limits.take(row)  # and the next in line may have them


def test_tokens_are_taken_one_per_row_until_none_is_whole() -> None:
    limits = Limits(buckets={"api": Bucket("api", 5, 1.0, 3.2)})
    rows = [ti_row(rate_limit="api", ti_id=i) for i in range(5)]
    assert [limits.take(r) for r in rows] == [True, True, True, False, False]
    assert limits.buckets["api"].tokens == pytest.approx(0.2)


def test_a_rate_limit_without_a_bucket_is_let_through_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    limits = Limits()
    row = ti_row(rate_limit="gone", ti_id=42)
    with caplog.at_level(logging.WARNING, logger="sluice.scheduler.decide.limited"):
        assert limits.take(row)
    assert "TI 42 names rate limit 'gone', which has no bucket" in caplog.text
    limits.give_back(row)  # nothing to give back
    assert limits.buckets == {} and limits.used == {}


@pytest.mark.parametrize("delay", [float("nan"), float("inf"), 1e20])
def test_a_duration_option_that_is_no_finite_number_is_a_definition_error(delay: float) -> None:
    with DAG("limits_durations", schedule=None):
        refused(lambda: task(task_id="t", retry_delay=delay)(lambda: None), "retry_delay")
