"""Waitpoints: runs waiting on runs, times and tokens, without holding a slot: the tables.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from fairlane.schema.revision import execute
from fairlane.schema.revision import schema as migration_schema

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    schema = migration_schema()
    tz = sa.DateTime(timezone=True)
    op.add_column(
        "runs",
        sa.Column("has_waiters", sa.Boolean, nullable=False, server_default=sa.text("false")),
        schema=schema,
    )
    op.add_column(
        "runs",
        sa.Column("resume_ready", sa.Boolean, nullable=False, server_default=sa.text("false")),
        schema=schema,
    )
    op.drop_index("runs_leased_idx", table_name="runs", schema=schema)
    op.create_index(
        "runs_leased_idx",
        "runs",
        ["lease_until"],
        schema=schema,
        postgresql_where=sa.text("status IN ('EXECUTING', 'WAITING')"),
    )
    op.create_index(
        "runs_resumable_idx",
        "runs",
        ["environment", "queue"],
        schema=schema,
        postgresql_where=sa.text("status = 'WAITING' AND resume_ready"),
    )
    op.create_table(
        "waitpoints",
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=True),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("status", sa.Text, nullable=False, server_default="PENDING"),
        sa.Column("run_id", sa.BigInteger),
        sa.Column("complete_after", tz),
        sa.Column("timeout_at", tz),
        sa.Column("idempotency_key", sa.Text),
        sa.Column("inactive_idempotency_key", sa.Text),
        sa.Column("idempotency_expires_at", tz),
        sa.Column("is_error", sa.Boolean, nullable=False, server_default=sa.text("false")),
        sa.Column("output", postgresql.JSONB),
        sa.Column("created_at", tz, nullable=False, server_default=sa.text("now()")),
        sa.Column("completed_at", tz),
        sa.CheckConstraint(
            "kind IN ('RUN', 'DATETIME', 'MANUAL', 'BATCH')", name="waitpoints_kind_check"
        ),
        sa.CheckConstraint("status IN ('PENDING', 'COMPLETED')", name="waitpoints_status_check"),
        schema=schema,
    )
    op.create_index(
        "waitpoints_run_idx",
        "waitpoints",
        ["run_id"],
        unique=True,
        schema=schema,
        postgresql_where=sa.text("kind = 'RUN'"),
    )
    op.create_index(
        "waitpoints_token_key_idx",
        "waitpoints",
        ["idempotency_key"],
        unique=True,
        schema=schema,
        postgresql_where=sa.text("kind = 'MANUAL' AND idempotency_key IS NOT NULL"),
    )
    op.create_index(
        "waitpoints_due_idx",
        "waitpoints",
        [sa.text("coalesce(complete_after, timeout_at)")],
        schema=schema,
        postgresql_where=sa.text("status = 'PENDING' AND kind IN ('DATETIME', 'MANUAL')"),
    )
    op.create_table(
        "run_waitpoints",
        sa.Column("run_id", sa.BigInteger, primary_key=True),
        sa.Column("position", sa.Integer, primary_key=True),
        sa.Column("item", sa.Integer, primary_key=True),
        sa.Column("waitpoint_id", sa.BigInteger, nullable=False),
        schema=schema,
    )
    op.create_index(
        "run_waitpoints_waitpoint_idx", "run_waitpoints", ["waitpoint_id"], schema=schema
    )
    execute(
        """
        INSERT INTO {schema}.periodic_jobs (name, function, interval_s)
        VALUES ('complete_due_waitpoints', 'complete_due_waitpoints', 0.25)
        ON CONFLICT (name) DO NOTHING
        """
    )


def downgrade() -> None:
    schema = migration_schema()
    execute("DELETE FROM {schema}.periodic_jobs WHERE name = 'complete_due_waitpoints'")
    op.drop_table("run_waitpoints", schema=schema)
    op.drop_table("waitpoints", schema=schema)
    op.drop_index("runs_resumable_idx", table_name="runs", schema=schema)
    op.drop_index("runs_leased_idx", table_name="runs", schema=schema)
    op.create_index(
        "runs_leased_idx",
        "runs",
        ["lease_until"],
        schema=schema,
        postgresql_where=sa.text("status = 'EXECUTING'"),
    )
    op.drop_column("runs", "resume_ready", schema=schema)
    op.drop_column("runs", "has_waiters", schema=schema)
