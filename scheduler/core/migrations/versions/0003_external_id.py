"""task_instance.external_id: the Celery task id a CeleryTask's try is waiting on

Revision ID: 0003
Revises: 0002
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    with op.batch_alter_table("task_instance") as batch:
        batch.add_column(sa.Column("external_id", sa.String(length=250), nullable=True))


def downgrade() -> None:
    """Downgrade schema."""
    with op.batch_alter_table("task_instance") as batch:
        batch.drop_column("external_id")
