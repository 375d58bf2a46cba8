"""The page parameters of the API's long lists, `limit` and `offset`; each such list
answers its page with `total`, `limit` and `offset` (`GET …/runs`, `GET …/runs/{run_id}/tasks`).

A `limit` over PAGE_MAX, or an `offset` over MAX_OFFSET, is refused (422), as any
parameter out of its range is.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Query

PAGE_MAX = 500
"""Most items on one page of a list."""

MAX_OFFSET = 1_000_000_000
"""Largest offset asked (far above any list; bounds the SQL parameter)."""

Limit = Annotated[int, Query(ge=1, le=PAGE_MAX, description="items on this page")]
Offset = Annotated[int, Query(ge=0, le=MAX_OFFSET, description="items skipped")]
