"""task_try: each earlier try of a task instance, kept when the TI is reopened

A TI row holds one try's stamps; a retry or a clear reopens it and the next queueing
overwrites them. The trigger `tr_task_instance_try` copies the old row into `task_try`
when a TI's state goes from a try's own (running, or how the try ended) back to none,
scheduled or queued, with a try behind it. The states that fire it are never written by
the queueing, claim or result statements (they move scheduled -> queued -> running -> an
end), so the hot paths pay only the trigger's WHEN.

Revision ID: 0011
Revises: 0010
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from sluice.scheduler.core.db import UtcDateTime

# revision identifiers, used by Alembic.
revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_WHEN = (
    "OLD.try_number > 0"
    " AND OLD.state IN ('running', 'success', 'failed', 'up_for_retry', 'skipped',"
    " 'upstream_failed')"
    " AND NEW.state IN ('none', 'scheduled', 'queued')"
)
_COLUMNS = "ti_id, try_number, state, hostname, queued_at, start_date, end_date"
_OLD = (
    "OLD.id, OLD.try_number, OLD.state, OLD.hostname, OLD.queued_at, OLD.start_date, OLD.end_date"
)
_UPDATE = (
    "state = excluded.state, hostname = excluded.hostname, queued_at = excluded.queued_at,"
    " start_date = excluded.start_date, end_date = excluded.end_date"
)

POSTGRESQL = [
    f"""
CREATE FUNCTION sluice_ti_try() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO task_try ({_COLUMNS}) VALUES ({_OLD})
  ON CONFLICT (ti_id, try_number) DO UPDATE SET {_UPDATE};
  RETURN NULL;
END $$""",
    f"""
CREATE TRIGGER tr_task_instance_try AFTER UPDATE OF state ON task_instance
FOR EACH ROW WHEN ({_WHEN})
EXECUTE FUNCTION sluice_ti_try()""",
]

SQLITE = [
    f"""
CREATE TRIGGER tr_task_instance_try AFTER UPDATE OF state ON task_instance
FOR EACH ROW WHEN {_WHEN}
BEGIN
  INSERT INTO task_try ({_COLUMNS}) VALUES ({_OLD})
  ON CONFLICT (ti_id, try_number) DO UPDATE SET {_UPDATE};
END""",
]


def upgrade() -> None:
    """Upgrade schema."""
    op.create_table(
        "task_try",
        sa.Column("ti_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("try_number", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=20), nullable=False),
        sa.Column("hostname", sa.String(length=250), nullable=True),
        sa.Column("queued_at", UtcDateTime(timezone=True), nullable=True),
        sa.Column("start_date", UtcDateTime(timezone=True), nullable=True),
        sa.Column("end_date", UtcDateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["ti_id"],
            ["task_instance.id"],
            name=op.f("fk_task_try_ti_id_task_instance"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("ti_id", "try_number", name=op.f("pk_task_try")),
    )
    for statement in POSTGRESQL if op.get_context().dialect.name == "postgresql" else SQLITE:
        op.execute(statement)


def downgrade() -> None:
    """Downgrade schema."""
    if op.get_context().dialect.name == "postgresql":
        op.execute("DROP TRIGGER tr_task_instance_try ON task_instance")
        op.execute("DROP FUNCTION sluice_ti_try()")
    else:
        op.execute("DROP TRIGGER tr_task_instance_try")
    op.drop_table("task_try")
