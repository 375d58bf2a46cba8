"""event: events sent on a key, which resume the TIs deferred on `Event(key)`

An event (`sluice events send`, `POST /api/v1/events`) is stored: a TI that defers on its
key after it was sent, in a run queued before it, still finds it (`queries.events`).

Revision ID: 0020
Revises: 0019
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from sluice.scheduler.core.db import UtcDateTime

# revision identifiers, used by Alembic.
revision: str = "0020"
down_revision: str | Sequence[str] | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    """Upgrade schema."""
    op.create_table(
        "event",
        sa.Column("id", ID, autoincrement=True, nullable=False),
        sa.Column("key", sa.String(250), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("sent_at", UtcDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_event")),
    )
    op.create_index("ix_event_key_sent_at", "event", ["key", "sent_at"])


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_index("ix_event_key_sent_at", table_name="event")
    op.drop_table("event")
