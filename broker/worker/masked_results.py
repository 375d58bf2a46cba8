"""A try's return value with the secrets it read masked, kept for the UI and API.

The stored result stays whole (the tasks downstream take it as it was returned); when
the try's masker (`task_logs`' capture: the deployment's secrets and those the try read)
changes the result's JSON text, the masked text is kept beside it (`MaskedResult`) in a
short transaction of its own, before the result's, so it exists once the result does.
A result no secret is in costs one regex scan of its text and no write.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from sqlalchemy.orm import Session, sessionmaker

from sluice.broker.worker.retrying import retrying
from sluice.scheduler.core.db import transaction
from sluice.scheduler.core.queries.masked_results import save_masked_result

log = logging.getLogger(__name__)


def keep_masked_result(
    factory: sessionmaker[Session],
    ti_id: int,
    try_number: int,
    result: str | None,
    mask: Callable[[str], str] | None,
) -> None:
    """Store how `result` is shown if `mask` changes it; nothing otherwise."""
    if not result or mask is None:
        return
    display = mask(result)
    if display == result:
        return

    def write() -> None:
        with transaction(factory) as session:
            save_masked_result(session, ti_id, try_number, display)

    retrying(write)
    log.info("TI %s, try %s, returned a secret it read: shown masked", ti_id, try_number)
