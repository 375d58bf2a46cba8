"""The DAGs folder's sync stores each DAG version's shape (its task order and its detail's
task list) for the API, on both databases: a new version gets its own, an unchanged one
keeps it, and a row recorded without one gets one at its next sync."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest
from sqlalchemy import text

from sluice.scheduler.core.db import make_engine, make_session_factory, utcnow
from sluice.scheduler.scheduling.dagbag import sync_dag_folder
from sluice.scheduler.scheduling.shapes import shape_columns

DAG = """
from sluice import DAG, Task

def noop():
    return None

with DAG("shaped", schedule=None) as dag:
    first = Task("first", python_callable=noop)
    {more}
"""


def _write(folder: Path, more: str, mtime_ns: int) -> None:
    path = folder / "shaped.py"
    path.write_text(textwrap.dedent(DAG.format(more=more)))
    os.utime(path, ns=(mtime_ns, mtime_ns))  # a new fingerprint: the file is parsed again


def _row(url: str) -> tuple[list[str] | None, list[dict[str, object]] | None, dict]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            order, detail, spec = conn.execute(
                text("SELECT task_order, tasks_detail, serialized FROM dag WHERE dag_id = 'shaped'")
            ).one()
    finally:
        engine.dispose()
    spec = json.loads(spec) if isinstance(spec, str) else spec
    return (
        None if order is None else json.loads(order),
        None if detail is None else json.loads(detail),
        spec,
    )


def _update(url: str, statement: str) -> None:
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(text(statement))
    finally:
        engine.dispose()


def _sync(url: str, folder: Path) -> None:
    engine = make_engine(url)
    try:
        sync_dag_folder(make_session_factory(engine), folder, parse_timeout=20, now=utcnow())
    finally:
        engine.dispose()


@pytest.mark.parametrize("database", ["postgresql", "sqlite"])
def test_each_version_is_stored_with_its_shape(
    database: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    url = str(request.getfixturevalue("pg_url" if database == "postgresql" else "sqlite_url"))
    folder = tmp_path / "dags"
    folder.mkdir()

    # Given a DAG synced once
    _write(folder, "", 1_000_000_000)
    _sync(url, folder)
    order, detail, spec = _row(url)
    assert order == ["first"] and detail is not None and detail[0]["task_id"] == "first"
    assert shape_columns(spec) == {
        "task_order": json.dumps(order),
        "tasks_detail": json.dumps(detail, separators=(",", ":")),
    }

    # When a new version adds a task downstream, and is synced
    _write(folder, 'first >> Task("after", python_callable=noop)', 2_000_000_000)
    _sync(url, folder)

    # Then its shape is the new version's
    order, detail, _ = _row(url)
    assert order == ["first", "after"]
    assert detail is not None and [t["upstream"] for t in detail] == [[], ["first"]]

    # And the same version synced again (the file touched) keeps the shape stored with it
    _update(url, "UPDATE dag SET tasks_detail = '[\"kept\"]'")
    _write(folder, 'first >> Task("after", python_callable=noop)', 2_500_000_000)
    _sync(url, folder)
    assert _row(url)[1] == ["kept"]

    # And a row recorded without a shape (before migration 0014) gets one at its next sync,
    # even when its version did not change
    _update(url, "UPDATE dag SET task_order = NULL, tasks_detail = NULL")
    _write(folder, 'first >> Task("after", python_callable=noop)', 3_000_000_000)
    _sync(url, folder)
    assert _row(url)[0] == ["first", "after"]
