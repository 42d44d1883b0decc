"""Maintenance jobs: settings, TTL expiry, the concurrency sweeper and pruning.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02
"""

from collections.abc import Sequence
from typing import LiteralString

import sqlalchemy as sa
from alembic import op
from psycopg import sql
from sqlalchemy.dialects import postgresql

from fairlane.migrate import drop_functions, migration_schema, run_named_sql

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

FUNCTIONS: tuple[LiteralString, ...] = (
    "prune_finished_runs()",
    "sweep_concurrency()",
    "expire_ttl_runs()",
    "numeric_setting(text, numeric)",
)
JOBS = ("prune_finished_runs", "sweep_concurrency", "expire_ttl_runs")


def upgrade() -> None:
    schema = migration_schema()
    op.create_table(
        "settings",
        sa.Column("name", sa.Text, primary_key=True),
        sa.Column("value", postgresql.JSONB, nullable=False),
        sa.Column("description", sa.Text, nullable=False, server_default=""),
        schema=schema,
    )
    run_named_sql(
        "seed_maintenance_settings",
        "create_setting_function",
        "create_expire_ttl_runs",
        "create_sweep_concurrency",
        "create_prune_finished_runs",
        "seed_ttl_periodic_job",
        "seed_sweeper_periodic_job",
        "seed_pruning_periodic_job",
    )


def downgrade() -> None:
    schema = migration_schema()
    bind = op.get_bind()
    remove_jobs = sql.SQL("DELETE FROM {}.periodic_jobs WHERE name = ANY(%(jobs)s)").format(
        sql.Identifier(schema)
    )
    bind.exec_driver_sql(remove_jobs.as_string(None), {"jobs": list(JOBS)})
    drop_functions(*FUNCTIONS)
    op.drop_table("settings", schema=schema)
