"""A property test of the OpenAPI spec: schemathesis sends what the spec allows (and
what it does not) to every operation, and no request gets a server error.

The database holds the test DAGs and a run; each operation is also tried with the
path parameters naming them, so that generated requests reach real rows as
well as missing ones. Every request carries the token, so writes are exercised.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from fastapi import FastAPI
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, Phase, given
from hypothesis import settings as hypothesis_settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from sluice.scheduler.api import create_app
from sluice.scheduler.api.config import ApiConfig
from sluice.scheduler.core.settings import Settings
from tests.api.conftest import AUTH, TOKEN

EXAMPLES = {"dag_id": "demo", "run_id": "r1", "task_id": "extract"}


@pytest.fixture
def fuzz_app(settings: Settings) -> Iterator[FastAPI]:
    app = create_app(settings, config=ApiConfig(token=TOKEN))
    with TestClient(app) as client:
        created = client.post("/api/v1/dags/demo/runs", json={"run_id": "r1"}, headers=AUTH)
        assert created.status_code == 201
        yield app


@pytest.fixture
def api_schema(fuzz_app: FastAPI) -> Any:
    spec = copy.deepcopy(fuzz_app.openapi())
    for item in spec["paths"].values():
        for operation in item.values():
            for param in operation.get("parameters", []):
                if param["in"] == "path" and param["name"] in EXAMPLES:
                    param["schema"]["examples"] = [EXAMPLES[param["name"]]]
                    param["example"] = EXAMPLES[param["name"]]
    schema = schemathesis.openapi.from_dict(spec)
    schema.app = fuzz_app
    return schema


CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


def _exercise(strategy: Any, examples: int) -> None:
    @given(case=strategy)
    @hypothesis_settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        phases=[Phase.explicit, Phase.generate, Phase.shrink],
        suppress_health_check=list(HealthCheck),
    )
    def run(case: Any) -> None:
        case.call_and_validate(headers=AUTH, checks=CHECKS)

    run()


@pytest.mark.long
def test_no_request_gets_a_server_error(api_schema: Any) -> None:
    # Given every operation of the spec, when schemathesis sends it valid and invalid
    # requests (and requests naming the rows that exist), then none gets a 5xx and
    # every response matches the spec.
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert len(operations) >= 12
    for operation in operations:
        if operation.path.endswith("/health"):
            _exercise(operation.as_strategy(), 2)  # nothing to vary; each call waits on workers
            continue
        _exercise(operation.as_strategy(GenerationMode.POSITIVE), 25)
        _exercise(operation.as_strategy(GenerationMode.NEGATIVE), 25)
        known = {p.name: EXAMPLES[p.name] for p in operation.path_parameters if p.name in EXAMPLES}
        _exercise(operation.as_strategy(path_parameters=known), 25)
