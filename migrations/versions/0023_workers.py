"""The workers registry: one row per running worker.

``workers`` holds what each worker serves (its tasks, and its environments and queues, NULL
meaning all), its host, pid, fairlane version, concurrency, when it started and when its
heartbeat last reached the database. A worker inserts its row at start, refreshes
``last_seen_at`` with every heartbeat tick and deletes it at a clean stop. ``stale_after_s`` is
the worker's own bound (its lease, and never less than three heartbeat intervals): a row not
seen for that long is of a worker that is gone or hung, and the ``prune_dead_workers`` periodic
job deletes it.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import ARRAY

from fairlane.schema.revision import execute
from fairlane.schema.revision import schema as migration_schema

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    schema = migration_schema()
    tz = sa.DateTime(timezone=True)
    op.create_table(
        "workers",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("host", sa.Text, nullable=False),
        sa.Column("pid", sa.Integer, nullable=False),
        sa.Column("version", sa.Text, nullable=False),
        sa.Column("tasks", ARRAY(sa.Text), nullable=False, server_default="{}"),
        sa.Column("environments", ARRAY(sa.Text)),
        sa.Column("queues", ARRAY(sa.Text)),
        sa.Column("concurrency", sa.Integer, nullable=False),
        sa.Column("stale_after_s", sa.Double, nullable=False),
        sa.Column("stopping", sa.Boolean, nullable=False, server_default=sa.text("false")),
        sa.Column("started_at", tz, nullable=False, server_default=sa.text("now()")),
        sa.Column("last_seen_at", tz, nullable=False, server_default=sa.text("now()")),
        sa.CheckConstraint("stale_after_s > 0", name="workers_stale_after_check"),
        schema=schema,
    )
    execute(
        """
        INSERT INTO {schema}.periodic_jobs (name, function, interval_s)
        VALUES ('prune_dead_workers', 'prune_dead_workers', 10.0)
        ON CONFLICT (name) DO NOTHING
        """
    )


def downgrade() -> None:
    schema = migration_schema()
    execute("DELETE FROM {schema}.periodic_jobs WHERE name = 'prune_dead_workers'")
    op.drop_table("workers", schema=schema)
