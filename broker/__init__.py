"""Sluice data plane: the Celery app, queues, the message contract and the worker-side task.

`from sluice.broker import attach` (also `sluice.attach`) installs Sluice on an existing
Celery app (`sluice.broker.worker.attaching`); it is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sluice.broker.worker.attaching import attach

__all__ = ["attach"]


def __getattr__(name: str) -> Any:
    if name == "attach":
        from sluice.broker.worker.attaching import attach

        return attach
    raise AttributeError(f"module 'sluice.broker' has no attribute {name!r}")
