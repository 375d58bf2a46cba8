"""task_instance.map_index: a task instance is one index of its task (-1: not mapped)

The unique key of a task instance becomes (dag_run_id, task_id, map_index), so a mapped
task can have one task instance per index. In SQLite the table is rebuilt (batch mode),
which drops its trigger: it is created again as migration 0009 made it.

Revision ID: 0010
Revises: 0009
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SQLITE_TI_TRIGGER = """
CREATE TRIGGER tr_task_instance_callback AFTER UPDATE OF state ON task_instance
FOR EACH ROW WHEN NEW.callback_mask <> 0 AND NEW.state IN ('success', 'failed', 'up_for_retry')
AND NEW.state IS NOT OLD.state
BEGIN
  INSERT OR IGNORE INTO callback (dedup_key, kind, dag_id, run_id, task_id, dag_run_id, ti_id,
      try_number, state, status, attempts, created_at, next_attempt_at)
  SELECT 'ti:' || NEW.id || ':' || NEW.try_number || ':' ||
         (CASE NEW.state WHEN 'success' THEN 'on_success' WHEN 'failed' THEN 'on_failure'
          ELSE 'on_retry' END),
         CASE NEW.state WHEN 'success' THEN 'on_success' WHEN 'failed' THEN 'on_failure'
          ELSE 'on_retry' END,
         NEW.dag_id, NEW.run_id, NEW.task_id, NEW.dag_run_id, NEW.id, NEW.try_number,
         NEW.state, 'pending', 0, NEW.end_date, NEW.end_date
  WHERE (NEW.callback_mask & (CASE NEW.state WHEN 'success' THEN 1 WHEN 'failed' THEN 2
         ELSE 4 END)) <> 0;
END"""


def _sqlite() -> bool:
    return op.get_context().dialect.name == "sqlite"


def upgrade() -> None:
    """Upgrade schema."""
    with op.batch_alter_table("task_instance") as batch:
        batch.add_column(sa.Column("map_index", sa.Integer(), nullable=False, server_default="-1"))
        batch.drop_constraint("uq_task_instance_run_task", type_="unique")
        batch.create_unique_constraint(
            "uq_task_instance_run_task_map", ["dag_run_id", "task_id", "map_index"]
        )
    if _sqlite():
        op.execute("DROP TRIGGER IF EXISTS tr_task_instance_callback")
        op.execute(SQLITE_TI_TRIGGER)


def downgrade() -> None:
    """Downgrade schema."""
    with op.batch_alter_table("task_instance") as batch:
        batch.drop_constraint("uq_task_instance_run_task_map", type_="unique")
        batch.create_unique_constraint("uq_task_instance_run_task", ["dag_run_id", "task_id"])
        batch.drop_column("map_index")
    if _sqlite():
        op.execute("DROP TRIGGER IF EXISTS tr_task_instance_callback")
        op.execute(SQLITE_TI_TRIGGER)
