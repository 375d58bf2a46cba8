"""`HEAD` is the migration scripts' head, and `check_current` reads the schema's revision
without Alembic: no schema, an old one and the current one."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text

from sluice.scheduler.core.db import make_engine
from sluice.scheduler.core.migrate import (
    HEAD,
    SchemaNotReady,
    alembic_head,
    check_current,
    current_revision,
    upgrade,
)


def test_head_is_the_newest_migration() -> None:
    assert alembic_head() == HEAD


def test_check_current_on_no_old_and_current_schemas(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'm.db'}")
    try:
        assert current_revision(engine) is None
        with pytest.raises(SchemaNotReady, match="no schema, this Sluice needs"):
            check_current(engine)
        upgrade(engine)
        check_current(engine)
        with engine.begin() as conn:
            conn.execute(text("UPDATE alembic_version SET version_num = '0001'"))
        with pytest.raises(SchemaNotReady, match="schema revision 0001, this Sluice needs"):
            check_current(engine)
    finally:
        engine.dispose()
