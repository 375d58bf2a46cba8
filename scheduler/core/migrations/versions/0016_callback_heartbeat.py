"""callback.last_heartbeat_at: the worker running a callback beats for it

A `running` callback was published again once it had run longer than
`SLUICE_CALLBACK_TIMEOUT`, whether or not its worker was alive, so a long callback ran
twice at once. Its worker now beats for it as for a try (`broker.worker.heartbeat`), and
the schedulers publish a running callback again only when its heartbeat is older than
`SLUICE_HEARTBEAT_TIMEOUT` (`core.queries.callbacks.publish_due`). NULL for a callback
never claimed since; its `started_at` stands for it.

Revision ID: 0016
Revises: 0015
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from sluice.scheduler.core.db import UtcDateTime

# revision identifiers, used by Alembic.
revision: str = "0016"
down_revision: str | Sequence[str] | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    with op.batch_alter_table("callback") as batch:
        batch.add_column(sa.Column("last_heartbeat_at", UtcDateTime(timezone=True), nullable=True))


def downgrade() -> None:
    """Downgrade schema."""
    with op.batch_alter_table("callback") as batch:
        batch.drop_column("last_heartbeat_at")
