"""Create or upgrade the schema with Alembic, and check that it is current."""

from __future__ import annotations

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine


class SchemaNotReady(RuntimeError):
    """The database has no schema, or an old one: `sluice db migrate` fixes it."""


def _config() -> Config:
    config = Config()
    config.set_main_option("script_location", "sluice.scheduler.core:migrations")
    return config


def upgrade(engine: Engine) -> None:
    """Bring the schema to the newest revision (idempotent)."""
    config = _config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")


def check_current(engine: Engine) -> None:
    """Raise SchemaNotReady unless the database is at the newest revision."""
    head = ScriptDirectory.from_config(_config()).get_current_head()
    with engine.connect() as connection:
        current = MigrationContext.configure(connection).get_current_revision()
    if current != head:
        where = "no schema" if current is None else f"schema revision {current}"
        raise SchemaNotReady(
            f"the database has {where}, this Sluice needs {head}: run `sluice db migrate`"
        )
