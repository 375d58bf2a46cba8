"""masked_result: a try's return value as shown, its secrets `***`

Written by a worker only when the try's masker changed the result's JSON text (the try
read a secret and returned it); the API and UI show it instead of the stored result,
which stays whole for the tasks downstream.

Revision ID: 0027
Revises: 0026
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0027"
down_revision: str | Sequence[str] | None = "0026"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    op.create_table(
        "masked_result",
        sa.Column("ti_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("try_number", sa.Integer(), nullable=False),
        sa.Column("display", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["ti_id"],
            ["task_instance.id"],
            name=op.f("fk_masked_result_ti_id_task_instance"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("ti_id", "try_number", name=op.f("pk_masked_result")),
    )


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_table("masked_result")
