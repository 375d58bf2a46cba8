"""Sluice is one package, `sluice`: what DAG files and Celery projects import, and what a
wheel installs."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_dag_files_and_celery_projects_import_from_sluice() -> None:
    from sluice import DAG, CeleryTask, ShellTask, Skip, TriggerRule, Upstream, task

    with DAG("imports", schedule=None) as dag:
        first = task(task_id="first")(lambda: 1)
        shell = ShellTask("shell", command="true", trigger_rule=TriggerRule.ALL_DONE)
        theirs = CeleryTask("theirs", name="tasks.add", args=[Upstream("first"), 1])
        first >> [shell, theirs]
    assert set(dag.tasks) == {"first", "shell", "theirs"}
    assert issubclass(Skip, Exception)


def test_attach_is_sluice_attach_and_sluice_broker_attach() -> None:
    import sluice
    from sluice.broker import attach
    from sluice.broker.worker.attaching import attach as defined

    assert sluice.attach is attach is defined
    assert callable(sluice.attach)


def test_a_dag_file_importing_sluice_loads_no_celery() -> None:
    """`attach` is imported on first use: parsing a DAG file pays for no Celery import."""
    done = subprocess.run(
        [sys.executable, "-c", "import sys, sluice; print('celery' in sys.modules)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == "False"


def test_the_wheel_installs_only_sluice_at_the_top(tmp_path: Path) -> None:
    # a copy of the source: building writes build/ and *.egg-info beside it
    source = tmp_path / "source"
    shutil.copytree(
        ROOT,
        source,
        symlinks=True,
        ignore=shutil.ignore_patterns(".*", "build", "*.egg-info", "__pycache__", "*.db"),
    )
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-v", "-w", str(tmp_path), str(source)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    # -v shows setuptools' own output: no warning that a folder of data is not a package
    said = done.stdout + done.stderr
    assert "absent from the `packages` configuration" not in said
    assert "SetuptoolsDeprecationWarning" not in said
    (wheel,) = tmp_path.glob("sluice-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/", 1)[0] for name in names}
    assert {t for t in top if not t.endswith(".dist-info")} == {"sluice"}
    for module in (
        "sluice/tasks/dag.py",
        "sluice/scheduler/cli/main.py",
        "sluice/broker/worker/task.py",
        "sluice/scheduler/core/migrations/versions/0001_initial_schema.py",
        "sluice/scheduler/core/migrations/script.py.mako",
        "sluice/scheduler/api/static/index.html",
    ):
        assert module in names
    # and every file of the web UI, as the source has them
    static = ROOT / "scheduler/api/static"
    ui_files = {
        f"sluice/scheduler/api/static/{path.relative_to(static).as_posix()}"
        for path in static.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and not path.name.startswith(".")
    }
    assert {"sluice/scheduler/api/static/dag.js", "sluice/scheduler/api/static/style.css"} <= (
        ui_files
    )
    assert sorted(ui_files - set(names)) == []
