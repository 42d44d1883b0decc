"""Batches: two-phase creation, streamed items, carrier runs through the fair scheduler:
the tables, the settings and the seal-timeout job.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from fairlane.schema.revision import execute
from fairlane.schema.revision import schema as migration_schema

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ENVIRONMENT_COLUMNS = (
    ("batch_refill_amount", sa.Double),
    ("batch_refill_interval_s", sa.Double),
    ("batch_bucket_max", sa.Double),
    ("batch_concurrency", sa.Integer),
)


def upgrade() -> None:
    schema = migration_schema()
    tz = sa.DateTime(timezone=True)
    op.add_column("runs", sa.Column("batch_id", sa.BigInteger), schema=schema)
    op.add_column("runs", sa.Column("batch_index", sa.Integer), schema=schema)
    op.create_index(
        "runs_batch_item_idx",
        "runs",
        ["batch_id", "batch_index"],
        unique=True,
        schema=schema,
        postgresql_where=sa.text("batch_id IS NOT NULL"),
    )
    for name, kind in ENVIRONMENT_COLUMNS:
        op.add_column("environments", sa.Column(name, kind), schema=schema)
    op.create_table(
        "batches",
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=True),
        sa.Column("environment", sa.Text, nullable=False),
        sa.Column("run_count", sa.Integer, nullable=False),
        sa.Column("status", sa.Text, nullable=False, server_default="PENDING"),
        sa.Column("sealed", sa.Boolean, nullable=False, server_default=sa.text("false")),
        sa.Column("idempotency_key", sa.Text),
        sa.Column("parent_run_id", sa.BigInteger),
        sa.Column("waitpoint_id", sa.BigInteger),
        sa.Column("succeeded", sa.Integer, nullable=False, server_default="0"),
        sa.Column("failed", sa.Integer, nullable=False, server_default="0"),
        sa.Column("seal_deadline", tz, nullable=False),
        sa.Column("created_at", tz, nullable=False, server_default=sa.text("now()")),
        sa.Column("sealed_at", tz),
        sa.Column("completed_at", tz),
        sa.Column("error", postgresql.JSONB),
        sa.CheckConstraint(
            "status IN ('PENDING', 'PROCESSING', 'COMPLETED', 'PARTIAL_FAILED', 'ABORTED')",
            name="batches_status_check",
        ),
        sa.CheckConstraint("run_count >= 1", name="batches_run_count_check"),
        schema=schema,
    )
    op.create_index(
        "batches_idempotency_key_idx",
        "batches",
        ["environment", "idempotency_key"],
        unique=True,
        schema=schema,
        postgresql_where=sa.text("idempotency_key IS NOT NULL"),
    )
    op.create_index(
        "batches_seal_deadline_idx",
        "batches",
        ["seal_deadline"],
        schema=schema,
        postgresql_where=sa.text("status = 'PENDING' AND NOT sealed"),
    )
    op.create_table(
        "batch_items",
        sa.Column("batch_id", sa.BigInteger, primary_key=True),
        sa.Column("index", sa.Integer, primary_key=True),
        sa.Column("task", sa.Text, nullable=False),
        sa.Column("payload", postgresql.JSONB),
        sa.Column(
            "options", postgresql.JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")
        ),
        sa.Column("oversized", sa.Boolean, nullable=False, server_default=sa.text("false")),
        sa.Column("state", sa.Text, nullable=False, server_default="PENDING"),
        sa.Column("run_id", sa.BigInteger),
        sa.Column("carrier_run_id", sa.BigInteger),
        sa.Column("error", postgresql.JSONB),
        sa.CheckConstraint(
            "state IN ('PENDING', 'TRIGGERED', 'FAILED', 'SKIPPED')",
            name="batch_items_state_check",
        ),
        sa.CheckConstraint("index >= 0", name="batch_items_index_check"),
        schema=schema,
    )
    op.create_index(
        "batch_items_pending_carrier_idx",
        "batch_items",
        ["carrier_run_id"],
        schema=schema,
        postgresql_where=sa.text("state = 'PENDING'"),
    )
    op.create_table(
        "batch_buckets",
        sa.Column("environment", sa.Text, primary_key=True),
        sa.Column("tokens", sa.Double, nullable=False),
        sa.Column("refilled_at", tz, nullable=False, server_default=sa.text("now()")),
        schema=schema,
    )
    execute(
        """
        INSERT INTO {schema}.settings (name, value, description) VALUES
            ('batch_max_items', '1000', 'Most items (run count) a batch may have'),
            ('batch_item_max_bytes', '3145728', 'An NDJSON item line longer than this becomes a pre-failed PAYLOAD_TOO_LARGE run (default 3 MiB)'),
            ('batch_refill_amount', '100', 'Batch token bucket: tokens (items) added per refill interval, unless the environment sets its own'),
            ('batch_refill_interval_s', '10', 'Batch token bucket: the refill interval, seconds'),
            ('batch_bucket_max', '1200', 'Batch token bucket: most tokens an environment can hold'),
            ('batch_concurrency', '10', 'Items of an environment''s batches turned into runs at once, unless the environment sets its own'),
            ('batch_item_max_attempts', '8', 'Attempts to turn a batch item into a run before it becomes a pre-failed BATCH_ITEM_COULD_NOT_TRIGGER run'),
            ('batch_seal_timeout_s', '1800', 'A batch not sealed this long after its creation is aborted (default 30 minutes)')
        ON CONFLICT (name) DO NOTHING
        """  # noqa: E501
    )
    execute(
        """
        INSERT INTO {schema}.periodic_jobs (name, function, interval_s)
        VALUES ('abort_unsealed_batches', 'abort_unsealed_batches', 5)
        ON CONFLICT (name) DO NOTHING
        """
    )


def downgrade() -> None:
    schema = migration_schema()
    execute("DELETE FROM {schema}.periodic_jobs WHERE name = 'abort_unsealed_batches'")
    execute(
        """
        DELETE FROM {schema}.settings
        WHERE name IN ('batch_max_items', 'batch_item_max_bytes', 'batch_refill_amount',
                       'batch_refill_interval_s', 'batch_bucket_max', 'batch_concurrency',
                       'batch_item_max_attempts', 'batch_seal_timeout_s')
        """
    )
    op.drop_table("batch_buckets", schema=schema)
    op.drop_table("batch_items", schema=schema)
    op.drop_table("batches", schema=schema)
    for name, _ in reversed(ENVIRONMENT_COLUMNS):
        op.drop_column("environments", name, schema=schema)
    op.drop_index("runs_batch_item_idx", table_name="runs", schema=schema)
    op.drop_column("runs", "batch_index", schema=schema)
    op.drop_column("runs", "batch_id", schema=schema)
