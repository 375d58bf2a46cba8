"""Web UI logins

`ui_session`: one login of the web UI (`POST /api/v1/session`): the SHA-256 of the
random id its cookie holds, its user, the CSRF token its writes must send, and when it
was made and ends. Deleted at logout and with its user.

Revision ID: 0026
Revises: 0025
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from sluice.scheduler.core.db import UtcDateTime

# revision identifiers, used by Alembic.
revision: str = "0026"
down_revision: str | Sequence[str] | None = "0025"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    op.create_table(
        "ui_session",
        sa.Column("id_hash", sa.String(64), nullable=False),
        sa.Column("user_name", sa.String(250), nullable=False),
        sa.Column("csrf_token", sa.String(64), nullable=False),
        sa.Column("created_at", UtcDateTime(timezone=True), nullable=False),
        sa.Column("expires_at", UtcDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["user_name"],
            ["sluice_user.name"],
            name=op.f("fk_ui_session_user_name_sluice_user"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id_hash", name=op.f("pk_ui_session")),
    )
    op.create_index(op.f("ix_ui_session_user_name"), "ui_session", ["user_name"])


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_index(op.f("ix_ui_session_user_name"), table_name="ui_session")
    op.drop_table("ui_session")
