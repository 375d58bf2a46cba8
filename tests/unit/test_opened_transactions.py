"""`scheduler.core.db.transaction_opened_by`: a transaction whose BEGIN travels with its first
statements (a `Pipeline`) commits, rolls back and fails as a plain transaction does; each
statement's rows are read back by its handle."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import bindparam, select, text, update
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from sluice.scheduler.core.db import (
    Handle,
    Pipeline,
    Sent,
    committed_at_once,
    held_connection,
    make_engine,
    make_session_factory,
    single_statement_factory,
    transaction,
    transaction_opened_by,
)
from sluice.scheduler.core.migrate import upgrade
from sluice.scheduler.core.models import Pool
from sluice.scheduler.core.named_sql import HotStatement, Twin, parse


def named(name: str, sql: str, twin: Any) -> HotStatement:
    """A named statement as the files of scheduler/core/sql/ hold them, with its SQLite
    twin (a SQLAlchemy statement taking the same values)."""
    (statement,) = parse(f"-- name: {name}\n-- A test's.\n{sql}")
    same: Twin = lambda values: (twin, values)  # noqa: E731
    return HotStatement(statement, same)


LOCK = "SELECT name, slots FROM pool WHERE name = 'p' FOR UPDATE"
LOCKED_P = named(
    "test_lock_pool_p",
    LOCK,
    select(Pool.name, Pool.slots).where(Pool.name == "p").with_for_update(),
)
TRY_LOCK = text("SELECT 1 FROM pool WHERE name = 'p' FOR UPDATE NOWAIT")


def pipeline(*statements: Sent) -> tuple[Pipeline, list[Handle]]:
    made = Pipeline()
    return made, made.extend(statements)


@pytest.fixture
def factory(pg_url: str) -> Iterator[sessionmaker[Session]]:
    engine = make_engine(pg_url)
    made = make_session_factory(engine)
    with transaction(made) as session:
        session.add(Pool(name="p", slots=1))
    yield made
    engine.dispose()


def slots(factory: sessionmaker[Session]) -> int:
    with factory() as session:
        return int(session.scalar(select(Pool.slots).where(Pool.name == "p")) or 0)


def lock_is_free(factory: sessionmaker[Session]) -> bool:
    engine = factory.kw["bind"]
    with engine.connect() as other:
        try:
            other.execute(TRY_LOCK)
            return True
        except OperationalError:
            return False


def test_the_opener_s_rows_its_lock_and_the_commit(factory: sessionmaker[Session]) -> None:
    opener, (lock,) = pipeline(LOCK)
    with transaction_opened_by(factory, opener) as (session, sent):
        assert [(r.name, r.slots) for r in sent[lock]] == [("p", 1)]
        assert not lock_is_free(factory)  # held from the opener on
        session.execute(update(Pool).where(Pool.name == "p").values(slots=2))
    assert slots(factory) == 2 and lock_is_free(factory)


def test_an_error_in_the_body_rolls_everything_back(factory: sessionmaker[Session]) -> None:
    opener, (lock,) = pipeline(LOCK)
    with pytest.raises(RuntimeError), transaction_opened_by(factory, opener) as (session, _):
        session.execute(update(Pool).where(Pool.name == "p").values(slots=3))
        raise RuntimeError("the body failed")
    assert slots(factory) == 1 and lock_is_free(factory)
    with transaction_opened_by(factory, opener) as (_, sent):  # the pooled connection is fine
        assert len(sent[lock]) == 1


def test_a_failing_opener_is_a_database_error(factory: sessionmaker[Session]) -> None:
    failing = transaction_opened_by(factory, pipeline("SELECT no_such_column FROM pool")[0])
    with pytest.raises(DBAPIError, match="no_such_column"), failing:
        pass
    opener, (lock,) = pipeline(LOCK)
    with transaction_opened_by(factory, opener) as (_, sent):
        assert len(sent[lock]) == 1


def test_a_dropped_connection_is_an_operational_error_then_replaced(
    factory: sessionmaker[Session], pg_url: str
) -> None:
    with transaction(single_statement_factory(factory)) as session:  # the pool it uses
        pid = session.scalar(text("SELECT pg_backend_pid()"))
    admin = make_engine(pg_url)  # its own pool: not the connection it terminates
    with admin.connect() as conn:
        conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
    admin.dispose()
    opener, (lock,) = pipeline(LOCK)
    with pytest.raises(OperationalError), transaction_opened_by(factory, opener):
        pass
    with transaction_opened_by(factory, opener) as (_, sent):  # a new connection
        assert len(sent[lock]) == 1


def test_sqlite_runs_the_same_pipeline_statement_by_statement(sqlite_url: str) -> None:
    """On SQLite the opener's statements run one by one in the transaction (BEGIN
    IMMEDIATE: one writer), and their rows are read the same way."""
    engine = make_engine(sqlite_url)
    upgrade(engine)
    factory = make_session_factory(engine)
    with transaction(factory) as session:
        session.add(Pool(name="p", slots=1))
    opener, (lock, set_slots) = pipeline((LOCKED_P, {}), (SET_SLOTS, {"n": 5}))
    with transaction_opened_by(factory, opener) as (session, sent):
        assert [(r.name, r.slots) for r in sent[lock]] == [("p", 1)]
        assert sent[set_slots][0].slots == 5
        session.execute(update(Pool).where(Pool.name == "p").values(slots=6))
    assert slots(factory) == 6
    again, (set_again,) = pipeline((SET_SLOTS, {"n": 7}))
    assert committed_at_once(factory, again)[set_again][0].slots == 7
    assert slots(factory) == 7
    engine.dispose()


SET_SLOTS = named(
    "test_set_slots",
    "UPDATE pool SET slots = :n WHERE name = 'p' RETURNING slots",
    update(Pool).where(Pool.name == "p").values(slots=bindparam("n")).returning(Pool.slots),
)
SLOTS_AT_LEAST = named(
    "test_slots_at_least",
    "SELECT name FROM pool WHERE slots >= :n2 AND name LIKE 'p%'",
    select(Pool.name).where(Pool.slots >= bindparam("n2"), Pool.name.like("p%")),
)


def test_several_statements_with_parameters_in_one_query(factory: sessionmaker[Session]) -> None:
    opener, (lock, set_slots, at_least) = pipeline(
        LOCK, (SET_SLOTS, {"n": 7}), (SLOTS_AT_LEAST, {"n2": 7})
    )
    with transaction_opened_by(factory, opener) as (_, sent):
        assert [len(sent[h]) for h in (lock, set_slots, at_least)] == [1, 1, 1]  # each its own
        assert sent[set_slots][0].slots == 7 and sent[at_least][0].name == "p"  # saw the write
        assert not lock_is_free(factory)
    assert slots(factory) == 7 and lock_is_free(factory)


def test_committed_at_once_holds_no_lock_after_and_fails_whole(
    factory: sessionmaker[Session],
) -> None:
    both, (_, set_slots) = pipeline(LOCK, (SET_SLOTS, {"n": 4}))
    sent = committed_at_once(factory, both)
    assert sent[set_slots][0].slots == 4
    assert slots(factory) == 4 and lock_is_free(factory)
    with pytest.raises(DBAPIError, match="no_such_column"):
        failing, _ = pipeline((SET_SLOTS, {"n": 9}), "SELECT no_such_column FROM pool")
        committed_at_once(factory, failing)
    assert slots(factory) == 4 and lock_is_free(factory)  # the first statement rolled back
    opener, (lock,) = pipeline(LOCK)
    with transaction_opened_by(factory, opener) as (_, again):  # the connection is usable
        assert len(again[lock]) == 1


PREPARED = text("SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'sluice%'")


def test_a_statement_is_prepared_once_per_connection(factory: sessionmaker[Session]) -> None:
    for n in (5, 6, 7):
        opener, (_, set_slots) = pipeline(LOCK, (SET_SLOTS, {"n": n}))
        with transaction_opened_by(factory, opener) as (session, sent):
            assert sent[set_slots][0].slots == n
            assert session.scalar(PREPARED) == 1  # the same connection (LIFO pool)
    assert slots(factory) == 7


NAMED = named(
    "test_named_pools",
    "SELECT name FROM pool WHERE name = ANY(:names::varchar[]) AND slots >= :least ORDER BY name",
    select(Pool.name)
    .where(Pool.name.in_(bindparam("names", expanding=True)), Pool.slots >= bindparam("least"))
    .order_by(Pool.name),
)
SLOTS_OF = [  # three texts, for the cap on prepared statements
    named(
        f"test_slots_of_{len(extra) + 1}_pools",
        f"SELECT slots FROM pool WHERE name IN ({', '.join(repr(n) for n in ['p', *extra])})",
        select(Pool.slots).where(Pool.name.in_(["p", *extra])),
    )
    for extra in ([], ["q"], ["q", "r"])
]


def test_values_are_bound_afresh_on_every_call(factory: sessionmaker[Session]) -> None:
    """A prepared statement's values are bound by psycopg at each call: calls of one
    statement send their own values, lists of any length included."""
    with transaction(factory) as session:
        session.add(Pool(name="q", slots=3))

    def named(names: list[str], least: int = 0) -> list[str]:
        one, (named_rows,) = pipeline((NAMED, {"names": names, "least": least}))
        return [row.name for row in committed_at_once(factory, one)[named_rows]]

    assert named(["p"]) == ["p"]
    assert named(["q"]) == ["q"]  # same shape, other value
    assert named(["q"], least=4) == []  # same shape, other scalar
    assert named(["p", "q"]) == ["p", "q"]  # another length
    assert named([]) == []
    assert named(["x", "p"], least=1) == ["p"]


def kill_held_connection(factory: sessionmaker[Session]) -> None:
    """Terminate the server process of the connection one-query sends keep."""
    held = held_connection(single_statement_factory(factory).kw["bind"])
    pid = held.connection.dbapi_connection.info.backend_pid  # type: ignore[union-attr]
    with factory.kw["bind"].connect() as other:
        other.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})


def test_a_kept_connection_that_broke_is_replaced(
    factory: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch
) -> None:
    import sluice.scheduler.core.db

    kill_held_connection(factory)  # in use: the query fails, the caller's retry succeeds
    with pytest.raises(OperationalError):
        committed_at_once(factory, pipeline((SET_SLOTS, {"n": 2}))[0])
    assert committed_at_once(factory, pipeline((SET_SLOTS, {"n": 3}))[0]) is not None
    kill_held_connection(factory)  # idle long enough to be pinged: replaced before use
    monkeypatch.setattr(sluice.scheduler.core.db, "IDLE_PING_SECONDS", 0.0)
    assert committed_at_once(factory, pipeline((SET_SLOTS, {"n": 4}))[0]) is not None
    assert slots(factory) == 4


def test_the_least_recently_used_statement_is_deallocated_past_the_cap(
    factory: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch
) -> None:
    import sluice.scheduler.core.db

    monkeypatch.setattr(sluice.scheduler.core.db, "PREPARED_PER_CONNECTION", 2)
    for statement in SLOTS_OF:  # three texts: the first is deallocated for the third
        committed_at_once(factory, pipeline((statement, {}))[0])
    with transaction_opened_by(factory, pipeline(LOCK)[0]) as (session, _):  # same connection
        assert session.scalar(PREPARED) == 2
    first, (slots_of,) = pipeline((SLOTS_OF[0], {}))
    assert committed_at_once(factory, first)[slots_of][0].slots == 1  # prepared again


def on_sluice_connection(factory: sessionmaker[Session], sql: str) -> None:
    """`sql` on the connection the next one-query transaction uses, behind its back."""
    conn = held_connection(single_statement_factory(factory).kw["bind"])
    conn.connection.dbapi_connection.execute(sql)  # type: ignore[union-attr]


def test_statements_missing_on_the_server_are_sent_unprepared(
    factory: sessionmaker[Session],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Behind a pooler in transaction mode a prepared statement may be missing on the
    server connection a query reaches: the query is sent again inline, and preparing
    stops for the process."""
    import sluice.scheduler.core.db

    monkeypatch.setattr(sluice.scheduler.core.db, "_preparing", True)
    assert committed_at_once(factory, pipeline(LOCK, (SET_SLOTS, {"n": 3}))[0]) is not None
    on_sluice_connection(factory, "DEALLOCATE ALL")  # what another server connection lacks
    both, (_, set_slots) = pipeline(LOCK, (SET_SLOTS, {"n": 4}))
    assert committed_at_once(factory, both)[set_slots][0].slots == 4 and slots(factory) == 4
    assert "sent unprepared" in caplog.text and not sluice.scheduler.core.db._preparing
    assert committed_at_once(factory, pipeline((SET_SLOTS, {"n": 5}))[0]) is not None
    with transaction_opened_by(factory, pipeline(LOCK)[0]) as (session, _):
        assert session.scalar(PREPARED) == 0
    assert slots(factory) == 5


def test_a_statement_prepared_already_under_its_name_is_used(
    factory: sessionmaker[Session],
) -> None:
    """A statement's name comes from its text: finding it prepared (a pooler's server
    connection shared with another process) is no error."""
    assert committed_at_once(factory, pipeline((SET_SLOTS, {"n": 6}))[0]) is not None
    conn = held_connection(single_statement_factory(factory).kw["bind"])
    conn.connection.info.pop("sluice_prepared", None)  # forget the names, keep the statements
    again, (set_slots,) = pipeline((SET_SLOTS, {"n": 7}))
    assert committed_at_once(factory, again)[set_slots][0].slots == 7


def test_a_sqlalchemy_statement_in_one_query_is_refused(factory: sessionmaker[Session]) -> None:
    """A one-query pipeline sends plain text or the named statements of
    scheduler/core/sql/: a SQLAlchemy statement (which would need SQLAlchemy's
    compilation internals to bind) is refused with a clear error, nothing sent."""
    built = select(Pool.slots).where(Pool.name == "p")
    with pytest.raises(TypeError, match="named statement of scheduler/core/sql/"):
        committed_at_once(factory, pipeline(LOCK, (built, {}))[0])
    assert lock_is_free(factory)
