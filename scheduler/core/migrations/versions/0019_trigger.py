"""trigger: what each deferred TI waits on, and the triggerer that runs it

A TI that defers (`sluice.defer`) moves to `deferred` and gets one `trigger` row in that
transaction: the trigger's class path and `serialize()` arguments, the attempt it resumes,
its deadline, and the lease of the triggerer running it (`triggerer_id`, `lease_until`).

Revision ID: 0019
Revises: 0018
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from sluice.scheduler.core.db import UtcDateTime

# revision identifiers, used by Alembic.
revision: str = "0019"
down_revision: str | Sequence[str] | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    """Upgrade schema."""
    op.create_table(
        "trigger",
        sa.Column("id", ID, autoincrement=True, nullable=False),
        sa.Column("ti_id", ID, nullable=False),
        sa.Column("attempt_id", sa.String(36), nullable=False),
        sa.Column("classpath", sa.String(1000), nullable=False),
        sa.Column("kwargs", sa.JSON(), nullable=False),
        sa.Column("created_at", UtcDateTime(timezone=True), nullable=False),
        sa.Column("timeout_at", UtcDateTime(timezone=True)),
        sa.Column("triggerer_id", ID),
        sa.Column("lease_until", UtcDateTime(timezone=True)),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_trigger")),
        sa.ForeignKeyConstraint(
            ["ti_id"],
            ["task_instance.id"],
            name=op.f("fk_trigger_ti_id_task_instance"),
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint("ti_id", name=op.f("uq_trigger_ti_id")),
    )
    op.create_index("ix_trigger_lease_until", "trigger", ["lease_until"])


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_index("ix_trigger_lease_until", table_name="trigger")
    op.drop_table("trigger")
