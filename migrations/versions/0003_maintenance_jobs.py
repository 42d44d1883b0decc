"""Maintenance jobs: the settings table, and the TTL, sweeper and pruning jobs.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from fairlane.schema.revision import execute
from fairlane.schema.revision import schema as migration_schema

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "settings",
        sa.Column("name", sa.Text, primary_key=True),
        sa.Column("value", postgresql.JSONB, nullable=False),
        sa.Column("description", sa.Text, nullable=False, server_default=""),
        schema=migration_schema(),
    )
    execute(
        """
        INSERT INTO {schema}.settings (name, value, description) VALUES
            ('max_ttl_s', 'null', 'Maximum TTL of a queued run, seconds: fills a missing TTL, caps a larger one'),
            ('ttl_batch_size', '1000', 'Runs expired per statement by expire_ttl_runs'),
            ('ttl_max_batches', '10', 'Statements per expire_ttl_runs tick'),
            ('max_lease_s', '86400', 'A lease reaching further than this is treated as corrupt by the sweeper'),
            ('prune_retention_s', '604800', 'Finished runs older than this are deleted (default 7 days)'),
            ('prune_batch_size', '1000', 'Runs deleted per statement by prune_finished_runs'),
            ('prune_max_batches', '10', 'Statements per prune_finished_runs tick')
        ON CONFLICT (name) DO NOTHING
        """  # noqa: E501
    )
    execute(
        """
        INSERT INTO {schema}.periodic_jobs (name, function, interval_s)
        VALUES ('expire_ttl_runs', 'expire_ttl_runs', 1.0),
               ('sweep_concurrency', 'sweep_concurrency', 60.0),
               ('prune_finished_runs', 'prune_finished_runs', 60.0)
        ON CONFLICT (name) DO NOTHING
        """
    )


def downgrade() -> None:
    execute(
        """
        DELETE FROM {schema}.periodic_jobs
        WHERE name IN ('prune_finished_runs', 'sweep_concurrency', 'expire_ttl_runs')
        """
    )
    op.drop_table("settings", schema=migration_schema())
