"""An unknown DAG is a 404 whose detail names the DAG file that failed to import, and why."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.api.conftest import AUTH

V1 = "/api/v1"


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", f"{V1}/dags/broken"),
        ("get", f"{V1}/dags/broken/runs"),
        ("get", f"{V1}/dags/broken/runs/r1"),
        ("post", f"{V1}/dags/broken/runs"),
    ],
)
def test_an_unknown_dag_names_the_file_that_failed(
    client: TestClient, method: str, path: str
) -> None:
    response = getattr(client, method)(
        path, headers=AUTH, **({"json": {}} if method == "post" else {})
    )
    assert response.status_code == 404, response.text
    assert response.json() == {
        "detail": "unknown DAG 'broken'; broken_dag.py failed to import: "
        "ImportError: this dag file is broken (broken_dag.py, line 2)"
    }
