"""Typed params (`sluice.Param`): their schemas checked when the DAG is defined, a conf
checked against them in one line, the defaults filling what a conf leaves out."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Any

import pytest

import sluice
from sluice import DAG, DagDefinitionError, Param, task
from sluice.tasks.loader import load_file
from sluice.tasks.params import ParamsError, param_values, resolve_params
from sluice.tasks.serialize import serialize_dag, version_hash

START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def issue_params() -> dict[str, Any]:
    return {
        "n": Param(10, type="integer", minimum=1, description="how many"),
        "day": Param(type="string", format="date"),
        "mode": Param("fast", enum=["fast", "full"]),
    }


def schema_of(params: dict[str, Any], **dag: Any) -> dict[str, Any]:
    with DAG("p", params=params, **dag) as d:

        @task
        def t() -> None:
            pass

    assert d.params_schema is not None
    return d.params_schema


def refused(schema: dict[str, Any], conf: dict[str, Any]) -> str:
    with pytest.raises(ParamsError) as caught:
        resolve_params(schema, conf)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_sluice_param_is_exported() -> None:
    assert sluice.Param is Param
    assert "Param" in sluice.__all__


def test_the_schema_is_one_json_schema_object_in_definition_order() -> None:
    schema = schema_of(issue_params())
    assert schema == {
        "type": "object",
        "properties": {
            "n": {"type": "integer", "minimum": 1, "description": "how many", "default": 10},
            "day": {"type": "string", "format": "date"},
            "mode": {"enum": ["fast", "full"], "default": "fast"},
        },
        "required": ["day"],
    }


def test_defaults_fill_what_the_conf_leaves_out_and_other_keys_are_left_alone() -> None:
    schema = schema_of(issue_params())
    conf = {"day": "2026-03-01", "other": [1, 2]}
    assert resolve_params(schema, conf) == {"n": 10, "day": "2026-03-01", "mode": "fast"}
    given = {"n": 3, "day": "2026-03-01", "mode": "full"}
    assert resolve_params(schema, given) == given


def test_a_bad_value_is_refused_in_one_line_naming_the_param_and_the_rule() -> None:
    schema = schema_of(issue_params())
    ok = {"day": "2026-03-01"}
    assert refused(schema, {**ok, "n": 0}) == "param 'n': 0 is less than the minimum of 1"
    assert refused(schema, {**ok, "n": "3"}) == "param 'n': '3' is not of type 'integer'"
    assert refused(schema, {**ok, "n": True}) == "param 'n': True is not of type 'integer'"
    assert refused(schema, {**ok, "mode": "slow"}) == (
        "param 'mode': 'slow' is not one of ['fast', 'full']"
    )


def test_a_param_without_default_is_required() -> None:
    schema = schema_of(issue_params())
    assert refused(schema, {"n": 2}) == (
        "param 'day' is required: it has no default; give it in the conf"
    )


def test_formats_are_enforced() -> None:
    schema = schema_of(
        {
            "day": Param("2026-01-31", type="string", format="date"),
            "at": Param("2026-01-31T10:00:00Z", type="string", format="date-time"),
            "to": Param("ann@example.com", type="string", format="email"),
        }
    )
    assert refused(schema, {"day": "2026-02-30"}) == "param 'day': '2026-02-30' is not a 'date'"
    assert refused(schema, {"day": "31/01/2026"}) == "param 'day': '31/01/2026' is not a 'date'"
    assert refused(schema, {"at": "2026-01-31 10:00"}) == (
        "param 'at': '2026-01-31 10:00' is not a 'date-time'"
    )
    assert refused(schema, {"to": "nobody"}) == "param 'to': 'nobody' is not a 'email'"
    assert resolve_params(schema, {"day": "2026-02-28", "at": "2026-02-28T00:00:00+01:00"})


def test_an_error_inside_a_value_says_where() -> None:
    schema = schema_of({"tags": Param([], type="array", items={"type": "string"})})
    assert refused(schema, {"tags": ["a", 3]}) == "param 'tags': at [1]: 3 is not of type 'string'"


def test_a_long_value_is_cut_to_one_short_line() -> None:
    schema = schema_of({"n": Param(1, type="integer")})
    message = refused(schema, {"n": "x\n" * 1000})
    assert len(message) < 400 and message.endswith("...")


def test_plain_values_are_params_with_a_default() -> None:
    schema = schema_of({"who": "world", "retries": 3})
    assert schema["properties"] == {"who": {"default": "world"}, "retries": {"default": 3}}
    assert resolve_params(schema, {"who": ["any", "json"]})["who"] == ["any", "json"]


def test_param_values_copies_the_defaults() -> None:
    schema = schema_of({"tags": Param(["a"], type="array")})
    values = param_values(schema, {})
    values["tags"].append("b")
    assert param_values(schema, {}) == {"tags": ["a"]}
    assert param_values(None, {"tags": 1}) == {}
    assert resolve_params(None, {"anything": 1}) == {}


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (
            {"n": Param(type="integr")},
            "DAG 'p': param 'n': not a valid JSON Schema: at [\"type\"]: 'integr' is not valid "
            "under any of the given schemas",
        ),
        (
            {"n": Param(0, type="integer", minimum=1)},
            "DAG 'p': param 'n': its default does not fit: 0 is less than the minimum of 1",
        ),
        (
            {"day": Param("tomorrow", type="string", format="date")},
            "DAG 'p': param 'day': its default does not fit: 'tomorrow' is not a 'date'",
        ),
        (
            {"day": Param(dt.date(2026, 1, 1))},
            "DAG 'p': param 'day': its default must be a JSON value, got datetime.date(2026, 1, 1)",
        ),
        (
            {"n": Param(1, minimum=dt.date(2026, 1, 1))},
            "DAG 'p': param 'n': its JSON Schema keywords must be JSON values",
        ),
        (
            {"n": Param(1, description=3)},  # type: ignore[arg-type]
            "DAG 'p': param 'n': description must be a string",
        ),
        ({1: Param(1)}, "DAG 'p': a param's name must be a non-empty string, got 1"),
        (["n"], "DAG 'p': params must be a dict of names to sluice.Param (or to default values)"),
    ],
)
def test_a_wrong_param_is_a_one_line_definition_error(params: Any, message: str) -> None:
    with pytest.raises(DagDefinitionError) as caught:
        DAG("p", params=params)
    assert str(caught.value) == message


def test_a_format_that_is_not_checked_is_refused() -> None:
    with pytest.raises(DagDefinitionError) as caught:
        DAG("p", params={"u": Param("x", type="string", format="no-such-format")})
    assert str(caught.value).startswith(
        "DAG 'p': param 'u': format 'no-such-format' is not checked here (checked: date, "
    )


@pytest.mark.parametrize(
    "schedule",
    ["@daily", dt.timedelta(hours=1), sluice.Asset("mem://a"), sluice.Watch(lambda cursor: [])],
    ids=["cron", "timedelta", "assets", "watch"],
)
def test_a_scheduled_dag_with_a_required_param_is_an_import_error(schedule: Any) -> None:
    with pytest.raises(DagDefinitionError) as caught:
        DAG("p", schedule=schedule, start_date=START, params=issue_params())
    assert str(caught.value) == (
        "DAG 'p': param 'day' has no default, but the DAG has a schedule, whose runs have "
        "no conf: give it a default"
    )
    # With defaults for all, it is a DAG like any other
    params = {**issue_params(), "day": Param("2026-01-01", type="string", format="date")}
    assert DAG("p", schedule=schedule, start_date=START, params=params).params_schema


def test_params_are_serialized_only_when_set() -> None:
    nothing: tuple[dict[str, Any] | None, ...] = (None, {})
    for params in nothing:
        with DAG("plain", params=params) as plain:

            @task
            def t() -> None:
                pass

        assert plain.params_schema is None
        assert "params" not in serialize_dag(plain)  # its version hash is as it was
    with DAG("typed", params=issue_params()) as typed:

        @task
        def t2() -> None:
            pass

    assert serialize_dag(typed)["params"] == typed.params_schema
    assert version_hash(serialize_dag(typed))


def test_the_readmes_example_loads_and_refuses_as_it_says(tmp_path: Path) -> None:
    text = (Path(__file__).parents[2] / "README.md").read_text()
    section = text[text.index("### Params") :]
    block = re.search(r"```python\n(.*?)```", section, re.S)
    assert block is not None
    (tmp_path / "report.py").write_text(block.group(1))
    (dag,) = load_file(tmp_path / "report.py")
    schema = serialize_dag(dag)["params"]
    assert schema["required"] == ["day"]
    assert resolve_params(schema, {"day": "2026-03-01"}) == {
        "n": 10,
        "day": "2026-03-01",
        "mode": "fast",
    }
    said = " ".join(section[: section.index("### Mapping")].split())
    assert "`sluice: error: param 'n': 0 is less than the minimum of 1`" in said
    assert refused(schema, {"n": 0, "day": "2026-03-01"}) == (
        "param 'n': 0 is less than the minimum of 1"
    )
