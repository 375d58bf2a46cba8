"""The decision core: what both the scheduler's passes and a worker's result path decide
with: readiness (`deps`), room within pools and limits (`queueing`), plans of what follows
a task (`plans`), the worker's decision of what follows a result and its SQL
(`downstream`, `downstream_sql`) and span lifecycle (`spans`).

Invariant: imports `sluice.scheduler.core` and the authoring types only, never the
scheduler's passes (`scheduling`, `jobs`) nor the Celery side (`sluice.broker`): checked by
import-linter (pyproject.toml).
"""
