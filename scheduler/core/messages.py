"""The message contract between publishers (schedulers, backfills) and workers.

A message carries ids and the `attempt_id`, never objects: the database is the
only source of truth, and the worker reads everything else from it. The body is
JSON (the Celery app accepts nothing else). `attempt_id` is also the Celery task
id, so a redelivered message and the original are the same try.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any


class MessageError(ValueError):
    """A message body that does not match the contract."""


@dataclass(frozen=True)
class RunMessage:
    """Run try `try_number` (attempt `attempt_id`) of TaskInstance `ti_id`."""

    ti_id: int
    attempt_id: str
    dag_id: str
    run_id: str
    task_id: str
    try_number: int
    queue: str
    trace: dict[str, Any] = field(default_factory=dict, compare=False)
    """The TI's `context_carrier`: sent as message headers, not in the body."""

    def to_kwargs(self) -> dict[str, Any]:
        """The Celery `kwargs` of the message: plain JSON types only."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "trace"}

    @classmethod
    def from_kwargs(cls, kwargs: dict[str, Any]) -> RunMessage:
        """Parse a message body; raises MessageError on missing, extra or mistyped fields."""
        expected = {f.name: f.type for f in fields(cls) if f.name != "trace"}
        missing = sorted(set(expected) - set(kwargs))
        extra = sorted(set(kwargs) - set(expected))
        if missing or extra:
            raise MessageError(f"bad run message: missing {missing}, unexpected {extra}")
        for name, type_name in expected.items():
            value = kwargs[name]
            want: type = int if type_name == "int" else str
            if not isinstance(value, want) or isinstance(value, bool):
                raise MessageError(f"bad run message: {name} must be {type_name}, got {value!r}")
        return cls(**kwargs)


@dataclass(frozen=True)
class CallbackMessage:
    """Run due callback `callback_id` once: its publish `token` is what a worker claims,
    so a message published again (a lost one) leaves the older one stale."""

    callback_id: int
    token: str

    def to_kwargs(self) -> dict[str, Any]:
        return {"callback_id": self.callback_id, "token": self.token}

    @classmethod
    def from_kwargs(cls, kwargs: dict[str, Any]) -> CallbackMessage:
        """Parse a message body; raises MessageError if it is not exactly the two fields."""
        callback_id, token = kwargs.get("callback_id"), kwargs.get("token")
        if set(kwargs) != {"callback_id", "token"} or not (
            isinstance(callback_id, int)
            and not isinstance(callback_id, bool)
            and isinstance(token, str)
        ):
            raise MessageError(f"bad callback message: {sorted(kwargs)}")
        return cls(callback_id, token)
