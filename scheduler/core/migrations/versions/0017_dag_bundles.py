"""DAG bundles: versions of a git bundle's DAGs, and the commit a run keeps

`dag_version` holds a git bundle's DAG as parsed at each commit that changed it (or
that a run was asked for); `dag.bundle_version` and `dag.version_id` say which commit and
version a new run takes; `dag_run.bundle_version` and `dag_run.dag_version_id` are the
commit whose code every try of the run runs and the definition every decision about it
uses. All NULL for a folder bundle's DAGs and runs, which follow their current file as
before. `bundle_state` is what the schedulers last fetched of each git bundle.

Revision ID: 0017
Revises: 0016
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from sluice.scheduler.core.db import UtcDateTime

# revision identifiers, used by Alembic.
revision: str = "0017"
down_revision: str | Sequence[str] | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    """Upgrade schema."""
    op.create_table(
        "dag_version",
        sa.Column("id", ID, autoincrement=True, nullable=False),
        sa.Column("dag_id", sa.String(250), nullable=False),
        sa.Column("bundle", sa.String(64), nullable=False),
        sa.Column("commit_sha", sa.String(40), nullable=False),
        sa.Column("version_hash", sa.String(64), nullable=False),
        sa.Column("source_hash", sa.String(64), nullable=False),
        sa.Column("fileloc", sa.Text(), nullable=False),
        sa.Column("serialized", sa.JSON(), nullable=False),
        sa.Column("author", sa.String(250), nullable=False),
        sa.Column("committed_at", UtcDateTime(timezone=True), nullable=False),
        sa.Column("subject", sa.Text(), nullable=False),
        sa.Column("created_at", UtcDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_dag_version")),
        sa.UniqueConstraint("dag_id", "commit_sha", name="uq_dag_version_dag_id_commit_sha"),
    )
    op.create_index("ix_dag_version_dag_hash", "dag_version", ["dag_id", "version_hash"])
    op.create_table(
        "bundle_state",
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("head_commit", sa.String(40)),
        sa.Column("fetched_at", UtcDateTime(timezone=True)),
        sa.Column("failing_since", UtcDateTime(timezone=True)),
        sa.Column("error", sa.Text()),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_bundle_state")),
    )
    op.add_column("dag", sa.Column("bundle_version", sa.String(40)))
    op.add_column("dag", sa.Column("version_id", ID))
    op.add_column("dag_run", sa.Column("bundle_version", sa.String(40)))
    op.add_column("dag_run", sa.Column("dag_version_id", ID))


def downgrade() -> None:
    """Downgrade schema (plain `DROP COLUMN`, not batch: see 0016)."""
    op.drop_column("dag_run", "dag_version_id")
    op.drop_column("dag_run", "bundle_version")
    op.drop_column("dag", "version_id")
    op.drop_column("dag", "bundle_version")
    op.drop_table("bundle_state")
    op.drop_index("ix_dag_version_dag_hash", table_name="dag_version")
    op.drop_table("dag_version")
