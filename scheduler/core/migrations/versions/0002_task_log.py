"""task_log: each try's captured stdout, stderr and logging

Revision ID: 0002
Revises: 0001
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from sluice.scheduler.core.db import UtcDateTime

# revision identifiers, used by Alembic.
revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    op.create_table(
        "task_log",
        sa.Column("ti_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("try_number", sa.Integer(), nullable=False),
        sa.Column("attempt_id", sa.String(length=36), nullable=True),
        sa.Column("hostname", sa.String(length=250), nullable=True),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("dropped_lines", sa.Integer(), nullable=False),
        sa.Column("started_at", UtcDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", UtcDateTime(timezone=True), nullable=False),
        sa.Column("finished_at", UtcDateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["ti_id"],
            ["task_instance.id"],
            name=op.f("fk_task_log_ti_id_task_instance"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("ti_id", "try_number", name=op.f("pk_task_log")),
    )


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_table("task_log")
