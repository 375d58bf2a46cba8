"""Recording a finished try's result: one entry point (`record_result`), which chooses
the path (`paths.choose`, over the one table `paths.PATHS`) and runs it; what a path
reads (`Case`, its shape from `paths.decision`) and what it reports (`Recorded`).
"""

from __future__ import annotations

from sluice.broker.worker.result.case import Case, Path, Recorded, Then
from sluice.broker.worker.result.paths import PATHS, ResultPath, choose, decision, record_result

__all__ = [
    "PATHS",
    "Case",
    "Path",
    "Recorded",
    "ResultPath",
    "Then",
    "choose",
    "decision",
    "record_result",
]
