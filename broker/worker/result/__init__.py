"""Recording a finished try's result: one entry point (`record_result`), the paths in
one ordered table (`paths.PATHS`: `fan_in_at_once`, `chain_at_once`, `decided`,
`written`), what they read (`Case`) and what they report (`Recorded`).
"""

from __future__ import annotations

from sluice.broker.worker.result.case import Case, Recorded
from sluice.broker.worker.result.paths import PATHS, ResultPath, record_result

__all__ = ["PATHS", "Case", "Recorded", "ResultPath", "record_result"]
