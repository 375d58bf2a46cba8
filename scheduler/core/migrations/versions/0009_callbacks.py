"""callbacks: the `callback` table, `callback_mask` on TIs and runs, `dag_run.deadline_at`,
and the triggers that record a due callback in the statement that writes the state

A TI's state move to success, failed or up_for_retry, and a run's to success or failed,
inserts one `callback` row when the row's `callback_mask` has that kind's bit, with a
unique key per TI, try and kind (per run, kind and queueing), `ON CONFLICT DO NOTHING`
(`INSERT OR IGNORE` in SQLite). Rows without callbacks (mask 0) fail the trigger's WHEN
and cost nothing more.

In SQLite a later migration that makes Alembic rebuild `task_instance` or `dag_run`
(batch mode: copy and rename) drops their triggers: it must create them again.

Revision ID: 0009
Revises: 0008
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from sluice.scheduler.core.db import UtcDateTime

# revision identifiers, used by Alembic.
revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_COLUMNS = (
    "dedup_key, kind, dag_id, run_id, task_id, dag_run_id, ti_id, try_number, state, "
    "status, attempts, created_at, next_attempt_at"
)
_TI_KIND = (
    "CASE NEW.state WHEN 'success' THEN 'on_success' WHEN 'failed' THEN 'on_failure' "
    "ELSE 'on_retry' END"
)
_TI_BIT = "CASE NEW.state WHEN 'success' THEN 1 WHEN 'failed' THEN 2 ELSE 4 END"
_RUN_KIND = "CASE NEW.state WHEN 'success' THEN 'on_success' ELSE 'on_failure' END"
_RUN_BIT = "CASE NEW.state WHEN 'success' THEN 1 ELSE 2 END"

_TI_WHEN = (
    "NEW.callback_mask <> 0 AND NEW.state IN ('success', 'failed', 'up_for_retry') "
    "AND NEW.state {distinct} OLD.state"
)
_RUN_WHEN = (
    "NEW.callback_mask <> 0 AND NEW.state IN ('success', 'failed') "
    "AND NEW.state {distinct} OLD.state"
)

POSTGRESQL = [
    f"""
CREATE FUNCTION sluice_ti_callback() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF (NEW.callback_mask & ({_TI_BIT})) <> 0 THEN
    INSERT INTO callback ({_COLUMNS})
    VALUES ('ti:' || NEW.id || ':' || NEW.try_number || ':' || ({_TI_KIND}), {_TI_KIND},
            NEW.dag_id, NEW.run_id, NEW.task_id, NEW.dag_run_id, NEW.id, NEW.try_number,
            NEW.state, 'pending', 0, NEW.end_date, NEW.end_date)
    ON CONFLICT (dedup_key) DO NOTHING;
  END IF;
  RETURN NULL;
END $$""",
    f"""
CREATE TRIGGER tr_task_instance_callback AFTER UPDATE OF state ON task_instance
FOR EACH ROW WHEN ({_TI_WHEN.format(distinct="IS DISTINCT FROM")})
EXECUTE FUNCTION sluice_ti_callback()""",
    f"""
CREATE FUNCTION sluice_run_callback() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF (NEW.callback_mask & ({_RUN_BIT})) <> 0 THEN
    INSERT INTO callback ({_COLUMNS})
    VALUES ('run:' || NEW.id || ':' || ({_RUN_KIND}) || ':' || COALESCE(NEW.queued_at::text, ''),
            {_RUN_KIND}, NEW.dag_id, NEW.run_id, NULL, NEW.id, NULL, 0, NEW.state, 'pending',
            0, NEW.end_date, NEW.end_date)
    ON CONFLICT (dedup_key) DO NOTHING;
  END IF;
  RETURN NULL;
END $$""",
    f"""
CREATE TRIGGER tr_dag_run_callback AFTER UPDATE OF state ON dag_run
FOR EACH ROW WHEN ({_RUN_WHEN.format(distinct="IS DISTINCT FROM")})
EXECUTE FUNCTION sluice_run_callback()""",
]

SQLITE = [
    f"""
CREATE TRIGGER tr_task_instance_callback AFTER UPDATE OF state ON task_instance
FOR EACH ROW WHEN {_TI_WHEN.format(distinct="IS NOT")}
BEGIN
  INSERT OR IGNORE INTO callback ({_COLUMNS})
  SELECT 'ti:' || NEW.id || ':' || NEW.try_number || ':' || ({_TI_KIND}), {_TI_KIND},
         NEW.dag_id, NEW.run_id, NEW.task_id, NEW.dag_run_id, NEW.id, NEW.try_number,
         NEW.state, 'pending', 0, NEW.end_date, NEW.end_date
  WHERE (NEW.callback_mask & ({_TI_BIT})) <> 0;
END""",
    f"""
CREATE TRIGGER tr_dag_run_callback AFTER UPDATE OF state ON dag_run
FOR EACH ROW WHEN {_RUN_WHEN.format(distinct="IS NOT")}
BEGIN
  INSERT OR IGNORE INTO callback ({_COLUMNS})
  SELECT 'run:' || NEW.id || ':' || ({_RUN_KIND}) || ':' || COALESCE(NEW.queued_at, ''),
         {_RUN_KIND}, NEW.dag_id, NEW.run_id, NULL, NEW.id, NULL, 0, NEW.state, 'pending',
         0, NEW.end_date, NEW.end_date
  WHERE (NEW.callback_mask & ({_RUN_BIT})) <> 0;
END""",
]


def upgrade() -> None:
    """Upgrade schema."""
    op.create_table(
        "callback",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("dedup_key", sa.String(length=300), nullable=False),
        sa.Column("kind", sa.String(length=30), nullable=False),
        sa.Column("dag_id", sa.String(length=250), nullable=False),
        sa.Column("run_id", sa.String(length=250), nullable=False),
        sa.Column("task_id", sa.String(length=250), nullable=True),
        sa.Column(
            "dag_run_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True
        ),
        sa.Column("ti_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column("try_number", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=20), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("token", sa.String(length=36), nullable=True),
        sa.Column("created_at", UtcDateTime(timezone=True), nullable=True),
        sa.Column("next_attempt_at", UtcDateTime(timezone=True), nullable=True),
        sa.Column("published_at", UtcDateTime(timezone=True), nullable=True),
        sa.Column("started_at", UtcDateTime(timezone=True), nullable=True),
        sa.Column("finished_at", UtcDateTime(timezone=True), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_callback")),
        sa.UniqueConstraint("dedup_key", name=op.f("uq_callback_dedup_key")),
    )
    op.create_index("ix_callback_status_next", "callback", ["status", "next_attempt_at"])
    for table in ("task_instance", "dag_run"):
        with op.batch_alter_table(table) as batch:
            batch.add_column(
                sa.Column("callback_mask", sa.Integer(), nullable=False, server_default="0")
            )
    with op.batch_alter_table("dag_run") as batch:
        batch.add_column(sa.Column("deadline_at", UtcDateTime(timezone=True), nullable=True))
    op.create_index("ix_dag_run_deadline_at", "dag_run", ["deadline_at"])
    statements = POSTGRESQL if op.get_context().dialect.name == "postgresql" else SQLITE
    for statement in statements:
        op.execute(statement)


def downgrade() -> None:
    """Downgrade schema."""
    if op.get_context().dialect.name == "postgresql":
        op.execute("DROP TRIGGER tr_task_instance_callback ON task_instance")
        op.execute("DROP TRIGGER tr_dag_run_callback ON dag_run")
        op.execute("DROP FUNCTION sluice_ti_callback()")
        op.execute("DROP FUNCTION sluice_run_callback()")
    else:
        op.execute("DROP TRIGGER tr_task_instance_callback")
        op.execute("DROP TRIGGER tr_dag_run_callback")
    op.drop_index("ix_dag_run_deadline_at", table_name="dag_run")
    with op.batch_alter_table("dag_run") as batch:
        batch.drop_column("deadline_at")
    for table in ("task_instance", "dag_run"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("callback_mask")
    op.drop_index("ix_callback_status_next", table_name="callback")
    op.drop_table("callback")
