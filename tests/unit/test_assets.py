"""Assets in DAG files: URIs checked, conditions built with `|`, `&` and lists, stored as
JSON and evaluated over the assets with a new event; outlets and their extras."""

from __future__ import annotations

import pytest

from sluice import DAG, task
from sluice.tasks.assets import (
    Asset,
    OutletEvents,
    check_extras,
    condition_json,
    condition_text,
    condition_uris,
    holds,
)
from sluice.tasks.errors import DagDefinitionError
from sluice.tasks.serialize import serialize_dag

A, B, C = Asset("mem://a"), Asset("mem://b"), Asset("mem://c")


def test_a_condition_holds_as_written() -> None:
    cond = condition_json((A | B) & C)
    assert condition_text(cond) == "(mem://a | mem://b) & mem://c"
    assert condition_uris(cond) == {"mem://a", "mem://b", "mem://c"}
    assert not holds(cond, {"mem://b"})
    assert not holds(cond, {"mem://a", "mem://b"})
    assert holds(cond, {"mem://a", "mem://c"})
    assert holds(cond, {"mem://b", "mem://c", "other://x"})
    both = condition_json([A, B])
    assert not holds(both, {"mem://a"}) and holds(both, {"mem://a", "mem://b"})
    assert holds(condition_json(A), {"mem://a"})


@pytest.mark.parametrize("uri", ["", " s3://x", "s3://x\n", "a\x00b", "x" * 1001, "é" * 501, 42])
def test_a_bad_uri_is_one_line(uri: object) -> None:
    with pytest.raises(DagDefinitionError) as caught:
        Asset(uri)  # type: ignore[arg-type]
    assert "\n" not in str(caught.value)


def test_assets_are_keys_by_uri_and_serialized() -> None:
    assert Asset("mem://a", name="A") == A and hash(Asset("mem://a", name="A")) == hash(A)
    with DAG("on_assets", schedule=A | B) as dag:

        @task(outlets=[C, C])
        def make() -> None: ...

    spec = serialize_dag(dag)
    assert spec["schedule"] == {"assets": {"any": [{"uri": "mem://a"}, {"uri": "mem://b"}]}}
    assert spec["tasks"]["make"]["outlets"] == ["mem://c"]
    with (
        pytest.raises(DagDefinitionError, match="outlets must be a list of sluice.Asset"),
        DAG("bad_outlets"),
    ):

        @task(outlets=["mem://c"])
        def bad() -> None: ...


def test_outlet_events_take_the_asset_or_its_uri_and_check_extras() -> None:
    events = OutletEvents(["mem://a"])
    events[A]["extra"] = {"rows": 3}
    assert events["mem://a"]["extra"] == {"rows": 3}
    assert A in events and B not in events
    with pytest.raises(KeyError, match="not an outlet"):
        events[B]
    check_extras(events)
    events[A]["extra"] = {"when": object()}
    with pytest.raises(ValueError, match="is not JSON"):
        check_extras(events)
    events[A]["extra"] = {"big": "x" * 70_000}
    with pytest.raises(ValueError, match="over 65536 bytes"):
        check_extras(events)
