"""Encrypting connections and variables at rest with Fernet (`cryptography`), under
`SLUICE_FERNET_KEY`.

- The setting holds one key or several, comma-separated: a token made with any of them
  decrypts (`MultiFernet`), a new one is made with the first. `rotate` re-encrypts a token
  with the first key: to change keys, put the new key first, run `sluice secrets rotate`,
  then drop the old one.
- No key, no storing and no reading: `NoFernetKey`, one line (nothing is ever stored in
  plain text). A token no key decrypts is `UndecryptableValue`, one line naming the row.
- `cryptography` is imported on first use, not at import.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from sluice.scheduler.core.settings import ConfigError, Settings

if TYPE_CHECKING:
    from cryptography.fernet import MultiFernet

KEY_VARIABLE = "SLUICE_FERNET_KEY"
MAKE_A_KEY = (
    'python -c "from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())"'
)


class NoFernetKey(ConfigError):
    """SLUICE_FERNET_KEY is not set: connections and variables can be neither stored nor read."""


class UndecryptableValue(ConfigError):
    """A stored value that none of the keys decrypts (a key dropped before `rotate`)."""


class Box:
    """Encrypts text with the first key of `keys` and decrypts with any of them."""

    def __init__(self, keys: tuple[str, ...]) -> None:
        self._fernet = _multi_fernet(keys)

    def encrypt(self, text: str) -> str:
        return self._fernet.encrypt(text.encode("utf-8")).decode("ascii")

    def decrypt(self, token: str, what: str) -> str:
        """The text of `token`; UndecryptableValue naming `what` (e.g. "connection 'x'")."""
        from cryptography.fernet import InvalidToken

        try:
            return self._fernet.decrypt(token.encode("ascii")).decode("utf-8")
        except (InvalidToken, UnicodeError):
            raise UndecryptableValue(
                f"{what} cannot be decrypted with the keys of {KEY_VARIABLE}: it was encrypted "
                "with a key no longer there (put the old key back after the new one, then run "
                "`sluice secrets rotate`)"
            ) from None

    def rotate(self, token: str, what: str) -> str:
        """`token` encrypted again with the first key (its text unchanged)."""
        from cryptography.fernet import InvalidToken

        try:
            return self._fernet.rotate(token.encode("ascii")).decode("ascii")
        except (InvalidToken, UnicodeError):
            self.decrypt(token, what)  # raises the line naming it
            raise


def box_of(settings: Settings, doing: str = "store or read connections and variables") -> Box:
    """The box of `settings`' keys; NoFernetKey (one line, saying what could not be
    done and how to make a key) when there is none."""
    if not settings.fernet_key:
        raise NoFernetKey(
            f"{KEY_VARIABLE} is not set: Sluice cannot {doing} (they are stored encrypted, "
            f"never in plain text); make a key with {MAKE_A_KEY}"
        )
    return Box(settings.fernet_key)


@functools.lru_cache(maxsize=4)
def _multi_fernet(keys: tuple[str, ...]) -> MultiFernet:
    from cryptography.fernet import Fernet, MultiFernet

    return MultiFernet([Fernet(key) for key in keys])
