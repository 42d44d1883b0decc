"""Core engine: the runs table, its claim indexes and the periodic jobs of maintenance.

Revision ID: 0001
Revises:
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from fairlane.schema.revision import execute
from fairlane.schema.revision import schema as migration_schema

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

STATUSES = (
    "'DELAYED', 'QUEUED', 'EXECUTING', 'WAITING', 'COMPLETED', 'FAILED', 'CRASHED', "
    "'TIMED_OUT', 'EXPIRED', 'CANCELED', 'SYSTEM_FAILURE'"
)


def upgrade() -> None:
    schema = migration_schema()
    tz = sa.DateTime(timezone=True)
    op.create_table(
        "runs",
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=True),
        sa.Column("environment", sa.Text, nullable=False, server_default="default"),
        sa.Column("queue", sa.Text, nullable=False, server_default="default"),
        sa.Column("task", sa.Text, nullable=False),
        sa.Column("payload", postgresql.JSONB, nullable=False),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("priority", sa.Integer, nullable=False, server_default="0"),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("max_attempts", sa.Integer, nullable=False, server_default="3"),
        sa.Column("available_at", tz),
        sa.Column("created_at", tz, nullable=False, server_default=sa.text("now()")),
        sa.Column("started_at", tz),
        sa.Column("finished_at", tz),
        sa.Column("lease_token", postgresql.UUID(as_uuid=True)),
        sa.Column("lease_until", tz),
        sa.Column("worker_id", sa.Text),
        sa.Column("result", postgresql.JSONB),
        sa.Column("error", postgresql.JSONB),
        sa.Column("tags", postgresql.ARRAY(sa.Text), nullable=False, server_default="{}"),
        sa.Column(
            "metadata", postgresql.JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")
        ),
        sa.Column("machine", sa.Text),
        sa.Column("max_duration_s", sa.Double),
        sa.Column("ttl_s", sa.Double),
        sa.Column("expires_at", tz),
        sa.CheckConstraint(f"status IN ({STATUSES})", name="runs_status_check"),
        sa.CheckConstraint("max_attempts >= 1", name="runs_max_attempts_check"),
        schema=schema,
        postgresql_with={"fillfactor": "70"},
    )
    op.create_index(
        "runs_queued_idx",
        "runs",
        [sa.text("priority DESC"), "id"],
        schema=schema,
        postgresql_where=sa.text("status = 'QUEUED'"),
    )
    op.create_index(
        "runs_delayed_idx",
        "runs",
        ["available_at"],
        schema=schema,
        postgresql_where=sa.text("status = 'DELAYED'"),
    )
    op.create_index(
        "runs_expiring_idx",
        "runs",
        ["expires_at"],
        schema=schema,
        postgresql_where=sa.text("status = 'QUEUED' AND expires_at IS NOT NULL"),
    )
    op.create_index(
        "runs_finished_idx",
        "runs",
        ["finished_at"],
        schema=schema,
        postgresql_where=sa.text("finished_at IS NOT NULL"),
    )
    op.create_index(
        "runs_leased_idx",
        "runs",
        ["lease_until"],
        schema=schema,
        postgresql_where=sa.text("status = 'EXECUTING'"),
    )
    op.create_table(
        "periodic_jobs",
        sa.Column("name", sa.Text, primary_key=True),
        sa.Column("function", sa.Text, nullable=False),
        sa.Column("interval_s", sa.Double, nullable=False),
        sa.Column("enabled", sa.Boolean, nullable=False, server_default=sa.text("true")),
        sa.Column("next_due_at", tz, nullable=False, server_default=sa.text("now()")),
        sa.Column("last_started_at", tz),
        sa.Column("last_finished_at", tz),
        sa.Column("last_result", postgresql.JSONB),
        sa.Column("last_error", sa.Text),
        sa.Column("run_count", sa.BigInteger, nullable=False, server_default="0"),
        sa.CheckConstraint("interval_s > 0", name="periodic_jobs_interval_check"),
        schema=schema,
    )
    execute(
        """
        INSERT INTO {schema}.periodic_jobs (name, function, interval_s)
        VALUES ('reclaim_expired_leases', 'reclaim_expired_leases', 1.0),
               ('promote_delayed_runs', 'promote_delayed_runs', 0.5)
        ON CONFLICT (name) DO NOTHING
        """
    )


def downgrade() -> None:
    schema = migration_schema()
    op.drop_table("periodic_jobs", schema=schema)
    op.drop_table("runs", schema=schema)
