"""People and their API tokens

`sluice_user`: a person who uses the API (`sluice users create NAME --role ROLE`), with
an optional password hash (scrypt, `core.passwords`). `api_token`: a bearer token of a
user, stored as the SHA-256 of the token (the token itself is printed once, at
creation), with when it expires, was last used and was revoked.

Revision ID: 0025
Revises: 0024
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from sluice.scheduler.core.db import UtcDateTime

# revision identifiers, used by Alembic.
revision: str = "0025"
down_revision: str | Sequence[str] | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    op.create_table(
        "sluice_user",
        sa.Column("name", sa.String(250), nullable=False),
        sa.Column("role", sa.String(20), nullable=False),
        sa.Column("password_hash", sa.Text()),
        sa.Column("created_at", UtcDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_sluice_user")),
    )
    op.create_table(
        "api_token",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("user_name", sa.String(250), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("created_at", UtcDateTime(timezone=True), nullable=False),
        sa.Column("expires_at", UtcDateTime(timezone=True)),
        sa.Column("last_used_at", UtcDateTime(timezone=True)),
        sa.Column("revoked_at", UtcDateTime(timezone=True)),
        sa.ForeignKeyConstraint(
            ["user_name"],
            ["sluice_user.name"],
            name=op.f("fk_api_token_user_name_sluice_user"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_token")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_api_token_token_hash")),
    )


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_table("api_token")
    op.drop_table("sluice_user")
