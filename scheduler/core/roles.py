"""Who may do what through the API and the UI: three roles, each doing what the one
before it does and more.

- viewer: reads.
- operator: also triggers, clears, marks, cancels, sends events and writes notes.
- admin: also manages pools, users, tokens, connections and variables.
"""

from __future__ import annotations

from enum import StrEnum


class Role(StrEnum):
    VIEWER = "viewer"
    OPERATOR = "operator"
    ADMIN = "admin"

    @property
    def rank(self) -> int:
        return list(Role).index(self)

    def may(self, needed: Role) -> bool:
        """Whether this role may do what `needed` may."""
        return self.rank >= needed.rank
