"""Connections and variables at rest (SQLite): Fernet tokens only, any key decrypts, the
first encrypts, `rotate` moves every row to the first key; no key, nothing stored."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import pytest
from cryptography.fernet import Fernet
from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from sluice.scheduler.core.db import make_engine, make_session_factory, transaction, utcnow
from sluice.scheduler.core.fernet import NoFernetKey, UndecryptableValue, box_of
from sluice.scheduler.core.secrets_store import (
    add_connection,
    list_connections,
    list_variables,
    read_connection,
    read_variable,
    rotate,
    set_variable,
)
from sluice.scheduler.core.settings import ConfigError, Settings
from sluice.tasks.secrets import Connection

OLD, NEW = Fernet.generate_key().decode(), Fernet.generate_key().decode()
PASSWORD = "s3cret-pa$$word"
WAREHOUSE = Connection(
    conn_type="postgresql", host="db", port=5432, login="etl", password=PASSWORD, schema="wh"
)


@pytest.fixture
def factory(sqlite_url: str) -> Iterator[sessionmaker[Session]]:
    engine = make_engine(sqlite_url)
    yield make_session_factory(engine)
    engine.dispose()


def keyed(*keys: str) -> Settings:
    return Settings(fernet_key=keys)


def raw(factory: sessionmaker[Session]) -> dict[str, str]:
    """Every stored value as the database holds it, by table and name."""
    with factory() as session:
        conns = session.execute(text("SELECT name, value FROM connection")).all()
        variables = session.execute(text('SELECT "key", value FROM variable')).all()
    return {f"connection {n}": v for n, v in conns} | {f"variable {k}": v for k, v in variables}


def store_both(factory: sessionmaker[Session], settings: Settings) -> None:
    box = box_of(settings)
    with transaction(factory) as session:
        assert add_connection(session, box, "warehouse", WAREHOUSE, utcnow())
        set_variable(session, box, "token", "tok-abcdef", is_secret=True, now=utcnow())
        set_variable(session, box, "region", "eu-west-1", is_secret=False, now=utcnow())


def test_values_are_stored_as_fernet_tokens_only(factory: sessionmaker[Session]) -> None:
    settings = keyed(OLD)
    store_both(factory, settings)
    stored = raw(factory)
    assert len(stored) == 3
    for token in stored.values():
        assert token.startswith("gAAAA")  # a Fernet token, version 0x80
        sealed = base64.urlsafe_b64decode(token)  # not plain text wrapped in base64 either
        for plain in (PASSWORD, "tok-abcdef", "eu-west-1"):  # long: never there by chance
            assert plain not in token and plain.encode() not in sealed
    with factory() as session:
        assert read_connection(session, settings, "warehouse") == WAREHOUSE
        secret = read_variable(session, settings, "token")
        assert secret is not None and (secret.value, secret.is_secret) == ("tok-abcdef", True)
        assert [v.key for v in list_variables(session, settings)] == ["region", "token"]
        assert list_connections(session, settings) == [("warehouse", WAREHOUSE)]


def test_a_name_taken_writes_nothing_and_a_variable_is_replaced(
    factory: sessionmaker[Session],
) -> None:
    settings = keyed(OLD)
    store_both(factory, settings)
    box = box_of(settings)
    with transaction(factory) as session:
        assert not add_connection(session, box, "warehouse", Connection(host="x"), utcnow())
        set_variable(session, box, "token", "public now", is_secret=False, now=utcnow())
    with factory() as session:
        assert read_connection(session, settings, "warehouse") == WAREHOUSE
        token = read_variable(session, settings, "token")
        assert token is not None and (token.value, token.is_secret) == ("public now", False)


def test_rotation_moves_every_row_to_the_first_key(factory: sessionmaker[Session]) -> None:
    # Given rows encrypted with the old key
    store_both(factory, keyed(OLD))
    before = raw(factory)
    # When the new key is put first and the rows are rotated, in one transaction
    both = keyed(NEW, OLD)
    with transaction(factory) as session:
        assert rotate(session, box_of(both)) == (1, 2)
    # Then every ciphertext changed, and the new key alone reads every value
    after = raw(factory)
    assert set(after) == set(before)
    assert all(after[name] != before[name] for name in before)
    with factory() as session:
        assert read_connection(session, keyed(NEW), "warehouse") == WAREHOUSE
        assert [v.value for v in list_variables(session, keyed(NEW))] == [
            "eu-west-1",
            "tok-abcdef",
        ]
        # and the old key alone no longer does, with one line naming the row
        with pytest.raises(UndecryptableValue, match="connection 'warehouse' cannot be decrypted"):
            read_connection(session, keyed(OLD), "warehouse")


def test_any_key_decrypts_and_the_first_encrypts(factory: sessionmaker[Session]) -> None:
    store_both(factory, keyed(OLD))
    with factory() as session:
        assert read_connection(session, keyed(NEW, OLD), "warehouse") == WAREHOUSE
    with transaction(factory) as session:
        set_variable(session, box_of(keyed(NEW, OLD)), "fresh", "v1", is_secret=False, now=utcnow())
    with factory() as session:
        fresh = read_variable(session, keyed(NEW), "fresh")
        assert fresh is not None and fresh.value == "v1"
        with pytest.raises(UndecryptableValue):
            read_variable(session, keyed(OLD), "fresh")


def test_without_a_key_nothing_is_stored_or_read(factory: sessionmaker[Session]) -> None:
    with pytest.raises(NoFernetKey, match="SLUICE_FERNET_KEY is not set") as caught:
        box_of(Settings())
    assert "\n" not in str(caught.value)
    store_both(factory, keyed(OLD))
    with factory() as session:
        # a name that is not there needs no key; one that is, does
        assert read_connection(session, Settings(), "absent") is None
        assert read_variable(session, Settings(), "absent") is None
        with pytest.raises(NoFernetKey, match="read connection 'warehouse'"):
            read_connection(session, Settings(), "warehouse")


def test_a_bad_key_is_one_line_that_never_shows_it() -> None:
    for bad in ("not-a-key", f"{OLD},{OLD[:-4]}", f"{OLD},,{NEW}"):
        with pytest.raises(ConfigError) as caught:
            Settings.from_env({"SLUICE_FERNET_KEY": bad})
        line = str(caught.value)
        assert line.startswith("SLUICE_FERNET_KEY must be Fernet keys") and "\n" not in line
        assert bad not in line and OLD not in line
    settings = Settings.from_env({"SLUICE_FERNET_KEY": f" {NEW} , {OLD} "})
    assert settings.fernet_key == (NEW, OLD)
    assert NEW not in repr(settings)
