"""The secrets of a run's conf: the values under keys whose name says they are secret
(`password`, `secret`, `token` or `key` in it, any case), masked in the log and the error
of every try that reads the conf (`runner._read_for_context`), as a connection's
password is (`secret_reads`).

A key's whole value is secret: every text and number under it, however deep. The walk is
bounded by the conf's own bounds (`SLUICE_MAX_CONF_DEPTH`, checked when the run was
made) and by `MAX_VALUES`.
"""

from __future__ import annotations

from typing import Any

from sluice.broker.worker.secret_reads import reveal

SECRET_WORDS = ("password", "secret", "token", "key")
MAX_VALUES = 1000
"""Most values masked from one conf (a conf of more secrets than that is not sane)."""


def is_secret_name(name: str) -> bool:
    lowered = name.lower()
    return any(word in lowered for word in SECRET_WORDS)


def secret_values(conf: Any) -> list[str]:
    """The texts (and numbers, as text) under the secret keys of `conf`, in walk order."""
    found: list[str] = []
    stack: list[tuple[Any, bool]] = [(conf, False)]
    while stack and len(found) < MAX_VALUES:
        value, secret = stack.pop()
        if isinstance(value, dict):
            stack.extend(
                (v, secret or (isinstance(k, str) and is_secret_name(k))) for k, v in value.items()
            )
        elif isinstance(value, list):
            stack.extend((v, secret) for v in value)
        elif secret and isinstance(value, str):
            found.append(value)
        elif secret and isinstance(value, int | float) and not isinstance(value, bool):
            found.append(str(value))
    return found


def mask_conf_secrets(conf: Any) -> None:
    """Mask the secrets of `conf` in the calling thread's try (nothing outside a try)."""
    reveal(secret_values(conf))
