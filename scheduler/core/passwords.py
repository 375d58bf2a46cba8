"""Passwords stored as memory-hard hashes: scrypt (`hashlib.scrypt`), a random salt per
password, compared in constant time. The stored form names its parameters, so they
can grow without breaking the hashes already stored: `scrypt$n$r$p$salt$hash` (salt
and hash in URL-safe base64).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

N, R, P = 2**14, 8, 1
"""scrypt's cost (16 MiB of memory a hash), as OWASP recommends at least."""
MAX_PASSWORD_BYTES = 1024
MIN_PASSWORD_CHARS = 8


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def check_password(password: str) -> str:
    """`password` if it may be set: 8 characters to 1 KiB; ValueError (one line) else."""
    if len(password) < MIN_PASSWORD_CHARS:
        raise ValueError(f"a password needs at least {MIN_PASSWORD_CHARS} characters")
    if len(password.encode()) > MAX_PASSWORD_BYTES:
        raise ValueError(f"a password may be at most {MAX_PASSWORD_BYTES} bytes")
    return password


def hash_password(password: str) -> str:
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=N, r=R, p=P, maxmem=64 * 2**20)
    return f"scrypt${N}${R}${P}${_b64(salt)}${_b64(digest)}"


def verify_password(password: str, stored: str | None) -> bool:
    """Whether `password` is the one `stored` was made from (False for no hash, a bad
    one, or a password over the bound)."""
    if stored is None or len(password.encode()) > MAX_PASSWORD_BYTES:
        return False
    try:
        kind, n, r, p, salt, digest = stored.split("$")
        if kind != "scrypt":
            return False
        expected = _unb64(digest)
        found = hashlib.scrypt(
            password.encode(),
            salt=_unb64(salt),
            n=int(n),
            r=int(r),
            p=int(p),
            maxmem=64 * 2**20,
            dklen=len(expected),
        )
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(found, expected)
