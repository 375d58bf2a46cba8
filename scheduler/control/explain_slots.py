"""Explain reasons of a scheduled TI waiting for a concurrency key's slot or a rate
limit's token (`decide.limited` counts them the same way).

Invariant: plain SELECTs in the caller's session; no lock, no write.
"""

from __future__ import annotations

from sluice.scheduler.control.explain_model import Reason, Subject, duration
from sluice.scheduler.control.explain_model import ReasonKind as K
from sluice.scheduler.core.queries.limits import holders, read_buckets, slots_in_use

MAX_LISTED = 10


def slot_reasons(subject: Subject) -> list[Reason]:
    """Its key's slots all held (by whom), or its bucket empty (and when a token comes)."""
    ti = subject.ti
    assert ti is not None
    reasons: list[Reason] = []
    if ti.concurrency is not None and ti.concurrency_key is not None:
        key = (ti.concurrency, ti.concurrency_key)
        used = slots_in_use(subject.session, [key])[key]
        limit = int(ti.concurrency_limit or 1)
        if used >= limit:
            held = holders(subject.session, [key], limit=MAX_LISTED)
            names = ", ".join(f"{h.dag_id}/{h.run_id}/{h.task_id}" for h in held[:3])
            more = used - min(len(held), 3)
            names += f" and {more} more" if more > 0 else ""
            reasons.append(
                Reason(
                    K.CONCURRENCY_FULL,
                    f"every slot of concurrency {ti.concurrency!r} key {ti.concurrency_key!r} "
                    f"is held: {used} of limit {limit}, by {names}",
                    data={
                        "concurrency": ti.concurrency,
                        "key": ti.concurrency_key,
                        "limit": limit,
                        "held": used,
                        "held_by": [h.as_dict() for h in held],
                    },
                )
            )
    if ti.rate_limit is not None:
        found = read_buckets(subject.session, subject.now, [ti.rate_limit])
        if found and found[0].tokens < 1:
            bucket = found[0]
            wait = bucket.next_token_in()
            reasons.append(
                Reason(
                    K.RATE_LIMITED,
                    f"rate limit {bucket.name!r} ({bucket.amount} per {bucket.per_seconds:g}s) "
                    f"has no token left: the next comes in {duration(wait)}",
                    data={
                        "rate_limit": bucket.name,
                        "limit": bucket.amount,
                        "per_seconds": bucket.per_seconds,
                        "tokens": round(bucket.tokens, 3),
                        "next_token_in_seconds": round(wait, 3),
                    },
                )
            )
    return reasons
