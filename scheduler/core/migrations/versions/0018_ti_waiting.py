"""task_instance.waiting: what a TI waits for between two tries of its code

A reschedule-mode sensor ends its try between pokes (`up_for_reschedule`); what its next
poke needs to know is kept here: `{"try": n, "since": "<ISO first poke>", "pokes": k}`,
so its timeout counts from its first poke across reschedules and its backoff grows. NULL
for every other TI.

Revision ID: 0018
Revises: 0017
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0018"
down_revision: str | Sequence[str] | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    op.add_column("task_instance", sa.Column("waiting", sa.JSON()))


def downgrade() -> None:
    """Downgrade schema (plain `DROP COLUMN`, not batch: see 0016)."""
    op.drop_column("task_instance", "waiting")
