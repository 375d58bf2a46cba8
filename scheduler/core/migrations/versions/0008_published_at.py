"""task_instance.published_at: when the queued sweep last published a try's message again

`queued_at` stays the time the try was queued, so a task's `queued_timeout` counts from
its queueing however often the sweep re-publishes it.

Revision ID: 0008
Revises: 0007
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from sluice.scheduler.core.db import UtcDateTime

# revision identifiers, used by Alembic.
revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    with op.batch_alter_table("task_instance") as batch:
        batch.add_column(sa.Column("published_at", UtcDateTime(), nullable=True))


def downgrade() -> None:
    """Downgrade schema."""
    with op.batch_alter_table("task_instance") as batch:
        batch.drop_column("published_at")
