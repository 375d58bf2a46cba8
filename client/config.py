"""What both clients build their httpx client with: the base URL, the headers (the bearer
token), a finite timeout and the bound of an answer's body."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

DEFAULT_TIMEOUT = 30.0
"""Seconds to connect, and between two reads or writes of one request."""

USER_AGENT = "sluice-client"


@dataclass(frozen=True)
class Options:
    """A client's settings, checked once when it is made."""

    base_url: str
    token: str | None
    timeout: float | httpx.Timeout
    max_response_bytes: int
    headers: Mapping[str, str] | None

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {self.base_url!r}")
        if self.max_response_bytes < 1:
            raise ValueError("max_response_bytes must be at least 1")
        if isinstance(self.timeout, int | float) and not self.timeout > 0:
            raise ValueError(f"timeout must be a number of seconds > 0, got {self.timeout}")
        if self.token is not None and (not self.token or self.token != self.token.strip()):
            raise ValueError("token must be non-empty, without spaces around it")

    def httpx_arguments(self) -> dict[str, Any]:
        """The arguments of `httpx.Client` and `httpx.AsyncClient` (both take the same)."""
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
        headers.update(self.headers or {})
        if self.token is not None:
            headers["Authorization"] = f"Bearer {self.token}"
        return {
            "base_url": self.base_url,
            "headers": headers,
            "timeout": self.timeout,
            "follow_redirects": False,
        }
