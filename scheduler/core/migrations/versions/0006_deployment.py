"""deployment: the database's own id, put in every message, so that a worker of another
deployment sharing the broker and namespace refuses the message instead of eating it

Revision ID: 0006
Revises: 0005
"""

import uuid
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    deployment = op.create_table(
        "deployment",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_deployment")),
    )
    op.bulk_insert(deployment, [{"id": str(uuid.uuid4())}])


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_table("deployment")
