"""Connections and variables, encrypted at rest

`connection` holds one row per `sluice connections add`, `variable` one per `sluice
variables set`: each `value` is a Fernet token (`SLUICE_FERNET_KEY`) of the connection's
JSON or the variable's text, so no column holds a secret in plain text. `is_secret`
marks a variable set with `--secret` (masked in the logs of the tries that read it).

Revision ID: 0024
Revises: 0023
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from sluice.scheduler.core.db import UtcDateTime

# revision identifiers, used by Alembic.
revision: str = "0024"
down_revision: str | Sequence[str] | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    op.create_table(
        "connection",
        sa.Column("name", sa.String(250), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.Column("created_at", UtcDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", UtcDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_connection")),
    )
    op.create_table(
        "variable",
        sa.Column("key", sa.String(250), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.Column("is_secret", sa.Boolean(), nullable=False),
        sa.Column("created_at", UtcDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", UtcDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_variable")),
    )


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_table("variable")
    op.drop_table("connection")
