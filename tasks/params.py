"""Typed params of a DAG (`sluice.Param`): JSON Schema keywords, checked by `jsonschema`.

A DAG's params are one JSON Schema object (`params_schema`), stored with the serialized
DAG: ``{"type": "object", "properties": {name: schema}, "required": [names]}``, where
each property is its param's keywords with its ``description`` and ``default`` (the
names without a default are ``required``). Checked when the DAG is defined: each schema
is a valid Draft 2020-12 schema, its ``format`` one that is enforced here, its default
JSON that fits it.

A run's conf is checked where the run is made (`resolve_params`, before anything is
written): the conf's keys that are params must fit them, and every param without a
default must be given. Keys that are not params are left alone. A task's
``context["params"]`` is `param_values`: the defaults, overridden by the conf's params.

``jsonschema`` is imported only when params are defined or checked (importing it costs
about a tenth of a second): a DAG without params never pays for it.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sluice.tasks.errors import DagDefinitionError

if TYPE_CHECKING:
    from jsonschema.protocols import Validator

MESSAGE_MAX = 300
"""Longest part of a message quoted from `jsonschema` (it repeats the value it refuses)."""


class _NoDefault:
    def __repr__(self) -> str:
        return "<no default>"


NO_DEFAULT: Any = _NoDefault()
"""A `Param` without a default: its value is required when a run is triggered."""


class ParamsError(ValueError):
    """A conf that the DAG's params refuse; the message is one line naming the param and
    the rule, e.g. ``param 'n': 0 is less than the minimum of 1``."""


class Param:
    """A DAG's param: its default (none: it is required when a run is triggered), its
    description, and JSON Schema keywords (``type``, ``minimum``, ``enum``, ``format``,
    ...) that every value given for it must fit."""

    def __init__(
        self, default: Any = NO_DEFAULT, *, description: str | None = None, **schema: Any
    ) -> None:
        self.default = default
        self.description = description
        self.schema = schema

    @property
    def has_default(self) -> bool:
        return self.default is not NO_DEFAULT

    def json(self) -> dict[str, Any]:
        """Its JSON Schema: its keywords, with its description and default when set."""
        out = dict(self.schema)
        if self.description is not None:
            out["description"] = self.description
        if self.has_default:
            out["default"] = self.default
        return out

    def __repr__(self) -> str:
        keywords = "".join(f", {k}={v!r}" for k, v in self.schema.items())
        return f"Param({self.default!r}{keywords})"


def _validator(schema: Mapping[str, Any]) -> Validator:
    from jsonschema import Draft202012Validator

    return Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)


def _short(text: str) -> str:
    """`text` on one line, at most MESSAGE_MAX characters."""
    line = " ".join(text.split())
    return line if len(line) <= MESSAGE_MAX else line[: MESSAGE_MAX - 3] + "..."


def _at(path: Any) -> str:
    """`at ["a"][0]: ` for an error inside a value, else nothing."""
    parts = list(path)
    if not parts:
        return ""
    where = "".join(f"[{p}]" if isinstance(p, int) else f"[{json.dumps(p)}]" for p in parts)
    return f"at {where}: "


def _problem(schema: Mapping[str, Any], value: Any) -> str | None:
    """Why `value` does not fit `schema` (the most relevant error), or None if it fits."""
    from jsonschema.exceptions import best_match

    error = best_match(_validator(schema).iter_errors(value))
    if error is None:
        return None
    return _short(_at(error.absolute_path) + error.message)


def _is_json(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True


def _property(name: str, param: Any) -> dict[str, Any]:
    """The checked JSON Schema of one param (a plain value is a `Param` with that
    default and no keyword); DagDefinitionError (one line, naming it) if it is wrong."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    if not isinstance(param, Param):
        param = Param(param)
    if param.description is not None and not isinstance(param.description, str):
        raise DagDefinitionError(f"param {name!r}: description must be a string")
    if not _is_json(param.schema):
        raise DagDefinitionError(f"param {name!r}: its JSON Schema keywords must be JSON values")
    if param.has_default and not _is_json(param.default):
        raise DagDefinitionError(
            f"param {name!r}: its default must be a JSON value, got {_short(repr(param.default))}"
        )
    schema = param.json()
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        raise DagDefinitionError(
            f"param {name!r}: not a valid JSON Schema: {_short(_at(exc.path) + exc.message)}"
        ) from None
    fmt = schema.get("format")
    checked = Draft202012Validator.FORMAT_CHECKER.checkers
    if fmt is not None and fmt not in checked:
        known = ", ".join(sorted(checked))
        raise DagDefinitionError(
            f"param {name!r}: format {fmt!r} is not checked here (checked: {known})"
        )
    if param.has_default:
        problem = _problem(schema, param.default)
        if problem is not None:
            raise DagDefinitionError(f"param {name!r}: its default does not fit: {problem}")
    return schema


def params_schema(params: object) -> dict[str, Any] | None:
    """The JSON Schema object of a DAG's `params` (None for none); DagDefinitionError
    (one line) for a name that is not a string, a wrong schema or a default that does
    not fit."""
    if params is None:
        return None
    if not isinstance(params, Mapping):
        raise DagDefinitionError(
            "params must be a dict of names to sluice.Param (or to default values)"
        )
    if not params:
        return None
    properties: dict[str, Any] = {}
    for name, param in params.items():
        if not isinstance(name, str) or not name:
            raise DagDefinitionError(f"a param's name must be a non-empty string, got {name!r}")
        properties[name] = _property(name, param)
    required = [name for name, schema in properties.items() if "default" not in schema]
    return {"type": "object", "properties": properties, "required": required}


def param_values(schema: Mapping[str, Any] | None, conf: Mapping[str, Any]) -> dict[str, Any]:
    """A run's params: each default (copied), overridden by the conf's keys that are
    params; nothing checked (`resolve_params` did, when the run was made)."""
    properties = (schema or {}).get("properties") or {}
    values = {n: copy.deepcopy(p["default"]) for n, p in properties.items() if "default" in p}
    values.update((name, conf[name]) for name in properties if name in conf)
    return values


def resolve_params(schema: Mapping[str, Any] | None, conf: Mapping[str, Any]) -> dict[str, Any]:
    """The params of a run of `conf` (`param_values`), once checked: ParamsError, one
    line naming the first param (in definition order) that is missing or whose value
    does not fit its schema. A conf without params, for a DAG without required params,
    is not checked at all (the defaults were checked when the DAG was defined)."""
    if not schema:
        return {}
    properties = schema.get("properties") or {}
    for name in schema.get("required") or ():
        if name not in conf:
            raise ParamsError(f"param {name!r} is required: it has no default; give it in the conf")
    for name, prop in properties.items():
        if name in conf:
            problem = _problem(prop, conf[name])
            if problem is not None:
                raise ParamsError(f"param {name!r}: {problem}")
    return param_values(schema, conf)
