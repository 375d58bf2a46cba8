"""job.error: why a failed job stopped

A scheduler or backfill whose loop died of an exception (junk read from the broker was
one) was recorded `success`, with nothing saying why it stopped. It is now recorded
`failed`, with the exception's line in `job.error` (NULL for the other rows).

Revision ID: 0015
Revises: 0014
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0015"
down_revision: str | Sequence[str] | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    op.add_column("job", sa.Column("error", sa.Text(), nullable=True))


def downgrade() -> None:
    """Downgrade schema."""
    with op.batch_alter_table("job") as batch:
        batch.drop_column("error")
