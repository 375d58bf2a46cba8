"""Sluice: DAGs of Python tasks on Celery workers, one SQL database as the shared state.

What DAG files and Celery projects import::

    from sluice import DAG, task, Skip, TriggerRule, ShellTask, CeleryTask, Upstream
    from sluice import Asset, Watch, RunRequest, TriggerDagRun, ExternalTaskSensor, Param
    from sluice import Concurrency, RateLimit, Connection, Variable
    import sluice; sluice.attach(app)

The package is three layers, each its own subpackage: `sluice.tasks` (authoring, imports
nothing else of ours), `sluice.scheduler` (the control plane) and `sluice.broker` (the data
plane, Celery). `attach` is imported on first use, so a DAG file that imports `sluice`
loads no Celery.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sluice.tasks import *  # noqa: F403 - the authoring API: `sluice.tasks.__all__`
from sluice.tasks import __all__ as _authoring

if TYPE_CHECKING:
    from sluice.broker import attach

__all__ = [*_authoring, "attach"]


def __getattr__(name: str) -> Any:
    if name == "attach":
        from sluice.broker import attach

        return attach
    raise AttributeError(f"module 'sluice' has no attribute {name!r}")
