"""task_instance indexes: a run's unfinished TIs, and a pool's first waiting TI, found
without reading them all

Revision ID: 0004
Revises: 0003
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    op.create_index("ix_task_instance_run_state", "task_instance", ["dag_run_id", "state"])
    waiting = sa.text("state = 'scheduled'")
    op.create_index(
        "ix_task_instance_waiting",
        "task_instance",
        ["pool", sa.text("priority_weight DESC"), "scheduled_at", "id"],
        postgresql_where=waiting,
        sqlite_where=waiting,
    )


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_index("ix_task_instance_waiting", table_name="task_instance")
    op.drop_index("ix_task_instance_run_state", table_name="task_instance")
