"""initial schema

Revision ID: 0001
Revises:
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from sluice.scheduler.core.db import UtcDateTime

# revision identifiers, used by Alembic.
revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    op.create_table(
        "dag",
        sa.Column("dag_id", sa.String(length=250), nullable=False),
        sa.Column("fileloc", sa.Text(), nullable=False),
        sa.Column("is_paused", sa.Boolean(), nullable=False),
        sa.Column("is_active", sa.Boolean(), nullable=False),
        sa.Column("schedule", sa.String(length=250), nullable=True),
        sa.Column("next_dagrun", UtcDateTime(timezone=True), nullable=True),
        sa.Column("next_dagrun_create_after", UtcDateTime(timezone=True), nullable=True),
        sa.Column("version_hash", sa.String(length=64), nullable=False),
        sa.Column("import_error", sa.Text(), nullable=True),
        sa.Column("serialized", sa.JSON(), nullable=False),
        sa.Column("max_active_runs", sa.Integer(), nullable=False),
        sa.Column("max_active_tasks", sa.Integer(), nullable=False),
        sa.Column("last_parsed_at", UtcDateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("dag_id", name=op.f("pk_dag")),
    )
    op.create_index("ix_dag_due", "dag", ["is_paused", "next_dagrun_create_after"], unique=False)
    op.create_table(
        "dag_file",
        sa.Column("fileloc", sa.String(length=1000), nullable=False),
        sa.Column("mtime_ns", sa.BigInteger(), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("import_error", sa.Text(), nullable=True),
        sa.Column("parsed_at", UtcDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("fileloc", name=op.f("pk_dag_file")),
    )
    op.create_table(
        "job",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("job_type", sa.String(length=20), nullable=False),
        sa.Column("hostname", sa.String(length=250), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=20), nullable=False),
        sa.Column("start_date", UtcDateTime(timezone=True), nullable=False),
        sa.Column("end_date", UtcDateTime(timezone=True), nullable=True),
        sa.Column("latest_heartbeat", UtcDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_job")),
    )
    op.create_index("ix_job_state_heartbeat", "job", ["state", "latest_heartbeat"], unique=False)
    op.create_table(
        "pool",
        sa.Column("name", sa.String(length=250), nullable=False),
        sa.Column("slots", sa.Integer(), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_pool")),
    )
    op.create_table(
        "dag_run",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("dag_id", sa.String(length=250), nullable=False),
        sa.Column("run_id", sa.String(length=250), nullable=False),
        sa.Column("logical_date", UtcDateTime(timezone=True), nullable=False),
        sa.Column("run_type", sa.String(length=20), nullable=False),
        sa.Column("state", sa.String(length=20), nullable=False),
        sa.Column("conf", sa.JSON(), nullable=False),
        sa.Column("dag_hash", sa.String(length=64), nullable=False),
        sa.Column("queued_at", UtcDateTime(timezone=True), nullable=True),
        sa.Column("start_date", UtcDateTime(timezone=True), nullable=True),
        sa.Column("end_date", UtcDateTime(timezone=True), nullable=True),
        sa.Column(
            "claimed_by_job_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True
        ),
        sa.Column("last_scheduling_decision", UtcDateTime(timezone=True), nullable=True),
        sa.Column(
            "started_by_job_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True
        ),
        sa.Column("context_carrier", sa.JSON(), nullable=False),
        sa.Column("span_status", sa.String(length=20), nullable=False),
        sa.ForeignKeyConstraint(["dag_id"], ["dag.dag_id"], name=op.f("fk_dag_run_dag_id_dag")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_dag_run")),
        sa.UniqueConstraint("dag_id", "logical_date", name="uq_dag_run_dag_id_logical_date"),
        sa.UniqueConstraint("dag_id", "run_id", name="uq_dag_run_dag_id_run_id"),
    )
    op.create_index(
        "ix_dag_run_state_decision", "dag_run", ["state", "last_scheduling_decision"], unique=False
    )
    op.create_table(
        "task_instance",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column(
            "dag_run_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False
        ),
        sa.Column("dag_id", sa.String(length=250), nullable=False),
        sa.Column("run_id", sa.String(length=250), nullable=False),
        sa.Column("task_id", sa.String(length=250), nullable=False),
        sa.Column("state", sa.String(length=20), nullable=False),
        sa.Column("try_number", sa.Integer(), nullable=False),
        sa.Column("max_tries", sa.Integer(), nullable=False),
        sa.Column("attempt_id", sa.String(length=36), nullable=True),
        sa.Column("queue", sa.String(length=250), nullable=False),
        sa.Column("pool", sa.String(length=250), nullable=False),
        sa.Column("pool_slots", sa.Integer(), nullable=False),
        sa.Column("priority_weight", sa.Integer(), nullable=False),
        sa.Column("hostname", sa.String(length=250), nullable=True),
        sa.Column("pid", sa.Integer(), nullable=True),
        sa.Column("scheduled_at", UtcDateTime(timezone=True), nullable=True),
        sa.Column("queued_at", UtcDateTime(timezone=True), nullable=True),
        sa.Column("start_date", UtcDateTime(timezone=True), nullable=True),
        sa.Column("end_date", UtcDateTime(timezone=True), nullable=True),
        sa.Column("next_retry_at", UtcDateTime(timezone=True), nullable=True),
        sa.Column("last_heartbeat_at", UtcDateTime(timezone=True), nullable=True),
        sa.Column(
            "queued_by_job_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True
        ),
        sa.Column("context_carrier", sa.JSON(), nullable=False),
        sa.Column("span_status", sa.String(length=20), nullable=False),
        sa.Column("result", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["dag_run_id"],
            ["dag_run.id"],
            name=op.f("fk_task_instance_dag_run_id_dag_run"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_task_instance")),
        sa.UniqueConstraint("dag_run_id", "task_id", name="uq_task_instance_run_task"),
    )
    op.create_index(
        "ix_task_instance_dag_state", "task_instance", ["dag_id", "state"], unique=False
    )
    op.create_index("ix_task_instance_state_pool", "task_instance", ["state", "pool"], unique=False)
    op.bulk_insert(
        sa.table("pool", sa.column("name"), sa.column("slots"), sa.column("description")),
        [{"name": "default_pool", "slots": 128, "description": "tasks that name no pool"}],
    )


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_index("ix_task_instance_state_pool", table_name="task_instance")
    op.drop_index("ix_task_instance_dag_state", table_name="task_instance")
    op.drop_table("task_instance")
    op.drop_index("ix_dag_run_state_decision", table_name="dag_run")
    op.drop_table("dag_run")
    op.drop_table("pool")
    op.drop_index("ix_job_state_heartbeat", table_name="job")
    op.drop_table("job")
    op.drop_table("dag_file")
    op.drop_index("ix_dag_due", table_name="dag")
    op.drop_table("dag")
