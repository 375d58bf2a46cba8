"""dag.task_order and dag.tasks_detail: a DAG version's shape, stored when it is synced

The API's DAG detail and grid need a DAG's tasks in topological order, and the detail
their specs as JSON. A new API process computed both on its first request for a DAG, from
the whole definition (`dag.serialized`: 3.7 MB to read and parse for 10,000 tasks): the
first DAG detail of W9's 10,000-task DAG took 127-212 ms. The DAGs folder's sync now
stores both when it records a new version (`scheduling.shapes`); the API reads them, and
computes them as before for a row recorded without them (NULL until its DAG is synced
again).

Revision ID: 0014
Revises: 0013
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0014"
down_revision: str | Sequence[str] | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    op.add_column("dag", sa.Column("task_order", sa.Text(), nullable=True))
    op.add_column("dag", sa.Column("tasks_detail", sa.Text(), nullable=True))


def downgrade() -> None:
    """Downgrade schema."""
    with op.batch_alter_table("dag") as batch:
        batch.drop_column("tasks_detail")
        batch.drop_column("task_order")
