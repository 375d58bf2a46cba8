"""job.capacity: how many triggers a triggerer runs at once

A triggerer's job row says its capacity (`sluice triggerer --capacity N`), so `sluice
status` can show `n/capacity` for each. NULL for the other jobs.

Revision ID: 0021
Revises: 0020
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0021"
down_revision: str | Sequence[str] | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    op.add_column("job", sa.Column("capacity", sa.Integer()))


def downgrade() -> None:
    """Downgrade schema (plain `DROP COLUMN`, not batch: see 0016)."""
    op.drop_column("job", "capacity")
