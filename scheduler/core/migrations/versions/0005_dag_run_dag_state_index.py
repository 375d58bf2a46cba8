"""dag_run index on (dag_id, state): a DAG's active runs counted without reading its history

Revision ID: 0005
Revises: 0004
"""

from collections.abc import Sequence

from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    op.create_index("ix_dag_run_dag_state", "dag_run", ["dag_id", "state"])


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_index("ix_dag_run_dag_state", table_name="dag_run")
