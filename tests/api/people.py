"""Users, tokens and passwords for the login tests, written straight into the database
(as `sluice users create`, `sluice tokens create` and `sluice users set-password` do)."""

from __future__ import annotations

from sluice.scheduler.core.db import make_engine, make_session_factory, transaction, utcnow
from sluice.scheduler.core.passwords import hash_password
from sluice.scheduler.core.queries import users
from sluice.scheduler.core.roles import Role

PASSWORD = "correct horse battery"


def add_user(url: str, name: str, role: Role, *, password: str | None = None) -> str:
    """A user with `role` and a token of theirs (returned), and `password` if given."""
    engine = make_engine(url)
    try:
        with transaction(make_session_factory(engine)) as session:
            users.create_user(session, name, role, utcnow())
            if password is not None:
                users.set_password_hash(session, name, hash_password(password))
            _, token = users.create_token(session, name, utcnow(), None)
        return token
    finally:
        engine.dispose()
