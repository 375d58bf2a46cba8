"""Concurrency by key and rate limits

A task's `Concurrency(name, key, limit)` is copied on its TIs (`concurrency`,
`concurrency_limit`); the key, computed by a worker from the run's params, is written
on the TI (`concurrency_key`) under the key's lock. A TI holds a slot of its key while it
is queued or running with its key set: slots are counted from the TIs, so a TI's move
frees its slot in the move's own transaction. A task's `RateLimit(name, ...)` is copied
on its TIs (`rate_limit`); `rate_limit` rows are the token buckets, one per name.

Revision ID: 0023
Revises: 0022
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from sluice.scheduler.core.db import UtcDateTime

# revision identifiers, used by Alembic.
revision: str = "0023"
down_revision: str | Sequence[str] | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


WAITS_FOR_A_LIMIT = (
    "state = 'scheduled' AND (concurrency_key IS NOT NULL OR rate_limit IS NOT NULL)"
)


def upgrade() -> None:
    """Upgrade schema."""
    op.add_column("task_instance", sa.Column("concurrency", sa.String(250)))
    op.add_column("task_instance", sa.Column("concurrency_limit", sa.Integer()))
    op.add_column("task_instance", sa.Column("concurrency_key", sa.String(250)))
    op.add_column("task_instance", sa.Column("rate_limit", sa.String(250)))
    op.create_index(
        "ix_task_instance_concurrency",
        "task_instance",
        ["concurrency", "concurrency_key", "state"],
        postgresql_where=sa.text("concurrency_key IS NOT NULL"),
        sqlite_where=sa.text("concurrency_key IS NOT NULL"),
    )
    op.create_index(
        "ix_task_instance_limited",
        "task_instance",
        [sa.text("priority_weight DESC"), "scheduled_at", "id"],
        postgresql_where=sa.text(WAITS_FOR_A_LIMIT),
        sqlite_where=sa.text(WAITS_FOR_A_LIMIT),
    )
    op.create_table(
        "rate_limit",
        sa.Column("name", sa.String(250), primary_key=True),
        sa.Column("amount", sa.Integer(), nullable=False),
        sa.Column("per_seconds", sa.Float(), nullable=False),
        sa.Column("tokens", sa.Float(), nullable=False),
        sa.Column("refilled_at", UtcDateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    """Downgrade schema (plain `DROP COLUMN`, not batch: see 0016)."""
    op.drop_table("rate_limit")
    op.drop_index("ix_task_instance_concurrency", table_name="task_instance")
    op.drop_index("ix_task_instance_limited", table_name="task_instance")
    op.drop_column("task_instance", "rate_limit")
    op.drop_column("task_instance", "concurrency_key")
    op.drop_column("task_instance", "concurrency_limit")
    op.drop_column("task_instance", "concurrency")
