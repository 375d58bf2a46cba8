"""A try's return value as it is shown (`MaskedResult`): written by its worker when the
try returned a secret it read, read by the API in place of the stored result."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from sluice.scheduler.core.models import MaskedResult


def save_masked_result(session: Session, ti_id: int, try_number: int, display: str) -> None:
    """Keep `display` for the try (the caller's transaction; a second write replaces)."""
    session.merge(MaskedResult(ti_id=ti_id, try_number=try_number, display=display))


def masked_result_of(session: Session, ti_id: int, try_number: int) -> str | None:
    """The shown form of the try's result, if it held a secret; else None (show it as
    stored)."""
    return session.scalar(
        select(MaskedResult.display).where(
            MaskedResult.ti_id == ti_id, MaskedResult.try_number == try_number
        )
    )
