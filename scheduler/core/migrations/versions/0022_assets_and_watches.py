"""assets and watches: asset, asset_event, dag_asset, asset_queue, dag_watch, watch_key,
and dag_run.triggering_events

Assets (`sluice.Asset`) are recorded with their events; a DAG scheduled on assets gets a
run when its condition holds over the events queued for it (`asset_queue`), and the run
keeps the events it consumed (`dag_run.triggering_events`). A watched DAG
(`sluice.Watch`) keeps its cursor, last error and lease in `dag_watch`, and every run key
it made a run for in `watch_key` (one run per key, ever).

Revision ID: 0022
Revises: 0021
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from sluice.scheduler.core.db import UtcDateTime

# revision identifiers, used by Alembic.
revision: str = "0022"
down_revision: str | Sequence[str] | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    """Upgrade schema."""
    op.create_table(
        "asset",
        sa.Column("uri", sa.String(1000), nullable=False),
        sa.Column("name", sa.String(250)),
        sa.Column("created_at", UtcDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("uri", name=op.f("pk_asset")),
    )
    op.create_table(
        "asset_event",
        sa.Column("id", ID, autoincrement=True, nullable=False),
        sa.Column("uri", sa.String(1000), nullable=False),
        sa.Column("extra", sa.JSON(), nullable=False),
        sa.Column("source_dag_id", sa.String(250)),
        sa.Column("source_run_id", sa.String(250)),
        sa.Column("source_task_id", sa.String(250)),
        sa.Column("source_map_index", sa.Integer()),
        sa.Column("created_at", UtcDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_asset_event")),
    )
    op.create_index("ix_asset_event_uri_id", "asset_event", ["uri", "id"])
    op.create_table(
        "dag_asset",
        sa.Column("dag_id", sa.String(250), nullable=False),
        sa.Column("role", sa.String(10), nullable=False),
        sa.Column("task_id", sa.String(250), nullable=False),
        sa.Column("uri", sa.String(1000), nullable=False),
        sa.PrimaryKeyConstraint("dag_id", "role", "task_id", "uri", name=op.f("pk_dag_asset")),
    )
    op.create_index("ix_dag_asset_uri_role", "dag_asset", ["uri", "role"])
    op.create_table(
        "asset_queue",
        sa.Column("dag_id", sa.String(250), nullable=False),
        sa.Column("event_id", ID, nullable=False),
        sa.PrimaryKeyConstraint("dag_id", "event_id", name=op.f("pk_asset_queue")),
        sa.ForeignKeyConstraint(
            ["event_id"],
            ["asset_event.id"],
            name=op.f("fk_asset_queue_event_id_asset_event"),
            ondelete="CASCADE",
        ),
    )
    op.create_table(
        "dag_watch",
        sa.Column("dag_id", sa.String(250), nullable=False),
        sa.Column("next_eval_at", UtcDateTime(timezone=True), nullable=False),
        sa.Column("cursor", sa.Text()),
        sa.Column("last_eval_at", UtcDateTime(timezone=True)),
        sa.Column("last_error", sa.Text()),
        sa.Column("error_at", UtcDateTime(timezone=True)),
        sa.Column("evaluations", sa.Integer(), nullable=False),
        sa.Column("lease_owner", ID),
        sa.Column("lease_until", UtcDateTime(timezone=True)),
        sa.PrimaryKeyConstraint("dag_id", name=op.f("pk_dag_watch")),
    )
    op.create_table(
        "watch_key",
        sa.Column("dag_id", sa.String(250), nullable=False),
        sa.Column("run_key", sa.String(1000), nullable=False),
        sa.Column("run_id", sa.String(250), nullable=False),
        sa.Column("created_at", UtcDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("dag_id", "run_key", name=op.f("pk_watch_key")),
    )
    op.add_column("dag_run", sa.Column("triggering_events", sa.JSON()))


def downgrade() -> None:
    """Downgrade schema (plain `DROP COLUMN`, not batch: see 0016)."""
    op.drop_column("dag_run", "triggering_events")
    op.drop_table("watch_key")
    op.drop_table("dag_watch")
    op.drop_table("asset_queue")
    op.drop_index("ix_dag_asset_uri_role", table_name="dag_asset")
    op.drop_table("dag_asset")
    op.drop_index("ix_asset_event_uri_id", table_name="asset_event")
    op.drop_table("asset_event")
    op.drop_table("asset")
