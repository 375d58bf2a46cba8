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
    op.add_column("callback", sa.Column("last_heartbeat_at", UtcDateTime(timezone=True)))


def downgrade() -> None:
    """Downgrade schema: `ALTER TABLE … DROP COLUMN` on both databases. Not a batch
    operation: on SQLite that copies `callback` to a new table and drops the old one,
    which the row triggers of `task_instance` and `dag_run` (migration 0009) name, so
    SQLite refuses it ("error in trigger … no such table: main.callback")."""
    op.drop_column("callback", "last_heartbeat_at")
