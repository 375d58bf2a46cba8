"""Stopping tries after the commit that took their `running` (or `queued`) state away:
a cancel, a mark, a run's `dagrun_timeout`, a try's `queued_timeout`.

Celery's revoke with terminate drops a queued message at every worker and terminates a
prefork child running it; the external tasks of CeleryTask tries are revoked too. In any
pool the worker's heartbeat also finds the try no longer running and stops it, so a
revoke that never arrives only delays the stop by a heartbeat interval. Best-effort: a
broker error is logged, never raised; a late result of a stopped try loses its
compare-and-set.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from sluice.broker.app import create_app
from sluice.scheduler.core.settings import Settings
from sluice.scheduler.jobs.celery_poller import revoke_ids

log = logging.getLogger(__name__)


def stop_tries(settings: Settings, attempts: Sequence[str], external_ids: Sequence[str]) -> None:
    """Revoke (terminate) the tries `attempts` and the external tasks `external_ids`."""
    if attempts:
        try:
            create_app(settings).control.revoke(list(attempts), terminate=True)
        except Exception as exc:
            log.warning("stopping %d tries failed: %s", len(attempts), exc)
    if external_ids:
        revoke_ids(settings, external_ids)
