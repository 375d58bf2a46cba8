"""Passwords as scrypt hashes, and what each role may do."""

from __future__ import annotations

import pytest

from sluice.scheduler.core.passwords import (
    MAX_PASSWORD_BYTES,
    check_password,
    hash_password,
    verify_password,
)
from sluice.scheduler.core.queries.users import TOKEN_PREFIX, UserError, check_user_name
from sluice.scheduler.core.roles import Role


def test_a_password_verifies_against_its_hash_and_nothing_else() -> None:
    stored = hash_password("correct horse")
    assert stored.startswith("scrypt$") and "correct horse" not in stored
    assert verify_password("correct horse", stored)
    assert not verify_password("correct hors", stored)
    assert hash_password("correct horse") != stored  # a salt of its own
    kind, n, r, p, salt, digest = stored.split("$")
    assert not verify_password("correct horse", "$".join([kind, n, r, p, salt, digest[:-2] + "AA"]))
    for broken in (None, "", "scrypt$1$2", "bcrypt$x$y$z$a$b", "scrypt$x$8$1$AA$AA"):
        assert not verify_password("correct horse", broken)
    assert not verify_password("x" * (MAX_PASSWORD_BYTES + 1), stored)


@pytest.mark.parametrize("bad", ["short", "", "x" * (MAX_PASSWORD_BYTES + 1)])
def test_a_password_out_of_bounds_is_refused_with_one_line(bad: str) -> None:
    with pytest.raises(ValueError) as caught:
        check_password(bad)
    assert "\n" not in str(caught.value)


def test_each_role_does_what_the_one_before_does() -> None:
    assert Role.ADMIN.may(Role.OPERATOR) and Role.ADMIN.may(Role.VIEWER)
    assert Role.OPERATOR.may(Role.VIEWER) and not Role.OPERATOR.may(Role.ADMIN)
    assert not Role.VIEWER.may(Role.OPERATOR)


@pytest.mark.parametrize("bad", ["", " x", "x ", "a\nb", "x" * 251])
def test_user_names_are_bounded(bad: str) -> None:
    with pytest.raises(UserError):
        check_user_name(bad)
    assert TOKEN_PREFIX == "slu_"
