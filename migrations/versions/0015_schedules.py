"""Cron schedules: one row per schedule, and one per tick fired.

A schedule names a task, a cron expression and a time zone, in an environment, under a key
(``task:<name>`` for one declared with ``@tasks.task(cron=...)``, else the caller's external
id). ``next_fire_at`` is its next tick; workers fire due schedules under the row lock (SKIP
LOCKED), and each fired tick is a row of ``schedule_fires`` keyed by schedule and tick, so a
tick can never make a second run.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-03
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from fairlane.schema.revision import schema as migration_schema

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    schema = migration_schema()
    tz = sa.DateTime(timezone=True)
    op.create_table(
        "schedules",
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=True),
        sa.Column("environment", sa.Text, nullable=False),
        sa.Column("key", sa.Text, nullable=False),
        sa.Column("task", sa.Text, nullable=False),
        sa.Column("cron", sa.Text, nullable=False),
        sa.Column("timezone", sa.Text, nullable=False, server_default="UTC"),
        sa.Column("payload", postgresql.JSONB),
        sa.Column(
            "options", postgresql.JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")
        ),
        sa.Column("declared", sa.Boolean, nullable=False, server_default=sa.text("false")),
        sa.Column("paused", sa.Boolean, nullable=False, server_default=sa.text("false")),
        sa.Column("next_fire_at", tz, nullable=False),
        sa.Column("last_tick", tz),
        sa.Column("last_run_id", sa.BigInteger),
        sa.Column("created_at", tz, nullable=False, server_default=sa.text("now()")),
        sa.UniqueConstraint("environment", "key", name="schedules_environment_key_key"),
        schema=schema,
    )
    op.create_index(
        "schedules_due_idx",
        "schedules",
        ["next_fire_at"],
        schema=schema,
        postgresql_where=sa.text("NOT paused"),
    )
    op.create_table(
        "schedule_fires",
        sa.Column(
            "schedule_id",
            sa.BigInteger,
            sa.ForeignKey(f"{schema}.schedules.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("tick", tz, primary_key=True),
        sa.Column("run_id", sa.BigInteger),
        sa.Column("fired_at", tz, nullable=False, server_default=sa.text("now()")),
        schema=schema,
    )


def downgrade() -> None:
    schema = migration_schema()
    op.drop_table("schedule_fires", schema=schema)
    op.drop_table("schedules", schema=schema)
