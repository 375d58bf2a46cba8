"""Which values of a run's conf are secrets (`broker.worker.conf_secrets`)."""

from __future__ import annotations

from sluice.broker.worker.conf_secrets import MAX_VALUES, is_secret_name, secret_values


def test_names_with_a_secret_word_in_any_case() -> None:
    for name in ("password", "DB_PASSWORD", "client_secret", "Token", "api_key", "monkey"):
        assert is_secret_name(name), name
    for name in ("customer", "host", "passage", "tok"):
        assert not is_secret_name(name), name


def test_every_text_and_number_under_a_secret_key_however_deep() -> None:
    conf = {
        "customer": "acme",
        "auth": {"token": "t-1", "user": "u"},
        "keys": ["k-1", {"nested": "k-2"}, 42, 1.5, True, None],
        "db": {"password": {"old": "p-1", "new": "p-2"}},
        "list": [{"secret": "s-1"}, "plain"],
    }
    found = secret_values(conf)
    assert sorted(found) == sorted(["t-1", "k-1", "k-2", "42", "1.5", "p-1", "p-2", "s-1"])
    assert secret_values({"customer": "acme", "n": 3}) == []


def test_the_walk_is_bounded() -> None:
    conf = {"keys": [f"k{i}" for i in range(MAX_VALUES * 3)]}
    assert len(secret_values(conf)) <= MAX_VALUES
