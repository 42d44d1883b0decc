"""Trigger options: idempotency keys, debounce keys, queue size limits, parent runs.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from fairlane.schema.revision import execute
from fairlane.schema.revision import schema as migration_schema

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    schema = migration_schema()
    tz = sa.DateTime(timezone=True)
    for column in (
        sa.Column("parent_run_id", sa.BigInteger),
        sa.Column("idempotency_key", sa.Text),
        sa.Column("idempotency_key_expires_at", tz),
        sa.Column("inactive_idempotency_key", sa.Text),
    ):
        op.add_column("runs", column, schema=schema)
    op.create_index(
        "runs_delayed_queue_idx",
        "runs",
        ["environment", "queue"],
        schema=schema,
        postgresql_where=sa.text("status = 'DELAYED'"),
    )
    op.create_index(
        "runs_idempotency_key_idx",
        "runs",
        ["environment", "task", "idempotency_key"],
        unique=True,
        schema=schema,
        postgresql_where=sa.text("idempotency_key IS NOT NULL"),
    )
    op.create_index(
        "runs_parent_idx",
        "runs",
        ["parent_run_id"],
        schema=schema,
        postgresql_where=sa.text("parent_run_id IS NOT NULL"),
    )
    for table in ("environments", "queues"):
        op.add_column(table, sa.Column("size_limit", sa.Integer), schema=schema)
        op.create_check_constraint(
            f"{table}_size_check", table, "size_limit IS NULL OR size_limit >= 0", schema=schema
        )
    op.create_table(
        "debounce_keys",
        sa.Column("environment", sa.Text, primary_key=True),
        sa.Column("task", sa.Text, primary_key=True),
        sa.Column("key", sa.Text, primary_key=True),
        sa.Column("run_id", sa.BigInteger),
        schema=schema,
    )
    execute(
        """
        INSERT INTO {schema}.settings (name, value, description) VALUES
            ('idempotency_key_ttl_s', '2592000', 'How long an idempotency key stays active when the trigger gives no idempotency_ttl, seconds (default 30 days)'),
            ('debounce_max_delay_s', '600', 'How long after its creation a debounced run can still be pushed back when the trigger gives no max_delay, seconds (default 10 minutes)'),
            ('debounce_prune_batch_size', '5000', 'Stale debounce keys deleted per prune_debounce_keys tick')
        ON CONFLICT (name) DO NOTHING
        """  # noqa: E501
    )
    execute(
        """
        INSERT INTO {schema}.periodic_jobs (name, function, interval_s)
        VALUES ('prune_debounce_keys', 'prune_debounce_keys', 60.0)
        ON CONFLICT (name) DO NOTHING
        """
    )


def downgrade() -> None:
    schema = migration_schema()
    execute("DELETE FROM {schema}.periodic_jobs WHERE name = 'prune_debounce_keys'")
    execute(
        """
        DELETE FROM {schema}.settings
        WHERE name IN ('idempotency_key_ttl_s', 'debounce_max_delay_s', 'debounce_prune_batch_size')
        """
    )
    op.drop_table("debounce_keys", schema=schema)
    for table in ("queues", "environments"):
        op.drop_constraint(f"{table}_size_check", table, schema=schema)
        op.drop_column(table, "size_limit", schema=schema)
    for index in ("runs_parent_idx", "runs_idempotency_key_idx", "runs_delayed_queue_idx"):
        op.drop_index(index, table_name="runs", schema=schema)
    for column in (
        "inactive_idempotency_key",
        "idempotency_key_expires_at",
        "idempotency_key",
        "parent_run_id",
    ):
        op.drop_column("runs", column, schema=schema)
