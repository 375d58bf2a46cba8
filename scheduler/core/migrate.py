"""Create or upgrade the schema with Alembic, and check that it is current.

`check_current` runs at every `sluice` command: it reads `alembic_version` itself and
compares it with `HEAD`, so a command does not import Alembic (a tenth of a second);
`tests/unit/test_migrate.py` checks that `HEAD` is Alembic's head.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from sqlalchemy import Engine, inspect, text

if TYPE_CHECKING:
    from alembic.config import Config

HEAD = "0027"
"""The newest migration's revision: raise it with every new migration."""


class SchemaNotReady(RuntimeError):
    """The database has no schema, or an old one: `sluice db migrate` fixes it."""


def _config() -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", "sluice.scheduler.core:migrations")
    return config


def alembic_head() -> str | None:
    """The head revision of the migration scripts, as Alembic sees it."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(_config()).get_current_head()


def upgrade(engine: Engine) -> None:
    """Bring the schema to the newest revision (idempotent)."""
    from alembic import command

    config = _config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")


def current_revision(engine: Engine) -> str | None:
    """The database's schema revision (None: no schema)."""
    with engine.connect() as connection:
        if not inspect(connection).has_table("alembic_version"):
            return None
        return connection.execute(text("SELECT version_num FROM alembic_version")).scalar()


def missing_sqlite_file(engine: Engine) -> str | None:
    """The path of a SQLite database file that is not there (connecting would create it)."""
    database = engine.url.database
    if engine.dialect.name != "sqlite" or not database or database == ":memory:":
        return None
    if database.startswith("file:") or os.path.exists(database):
        return None
    return database


def check_current(engine: Engine) -> None:
    """Raise SchemaNotReady unless the database is at the newest revision (a SQLite file
    that is not there is not created)."""
    missing = missing_sqlite_file(engine)
    if missing is not None:
        raise SchemaNotReady(
            f"there is no database at {missing}: run `sluice db migrate` to create it "
            "(or set SLUICE_DATABASE_URL)"
        )
    current = current_revision(engine)
    if current != HEAD:
        where = "no schema" if current is None else f"schema revision {current}"
        raise SchemaNotReady(
            f"the database has {where}, this Sluice needs {HEAD}: run `sluice db migrate`"
        )
