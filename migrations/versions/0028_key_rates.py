"""Rate limits per concurrency key: a queue's rate, and a bucket per key that it spent.

``queues.rate_limit`` runs per ``queues.rate_period_s`` seconds (NULL: no rate), with at most
``queues.rate_burst`` started at once after a quiet spell (NULL: ``rate_limit``). The rate
applies to each concurrency key of the queue on its own; keyless runs share one bucket, so a
queue without keys has one rate. Runs over the rate stay QUEUED until the bucket refills.

``rate_buckets`` keeps, per key that was served recently, the time its bucket is full again
(``full_at``: the generic cell rate algorithm's theoretical arrival time); a key without a row,
or whose ``full_at`` passed, has a full bucket, so ``prune_rate_buckets`` deletes those rows.
The claim reads and writes a bucket under its environment's row lock (sql/claim/key_rates.sql).

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from fairlane.schema.revision_helpers import execute
from fairlane.schema.revision_helpers import schema as migration_schema

revision: str = "0028"
down_revision: str | None = "0027"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    schema = migration_schema()
    op.add_column("queues", sa.Column("rate_limit", sa.Integer), schema=schema)
    op.add_column("queues", sa.Column("rate_period_s", sa.Double), schema=schema)
    op.add_column("queues", sa.Column("rate_burst", sa.Integer), schema=schema)
    op.create_check_constraint(
        "queues_rate_check",
        "queues",
        "(rate_limit IS NULL OR rate_limit > 0) AND (rate_period_s IS NULL OR rate_period_s > 0)"
        " AND (rate_burst IS NULL OR rate_burst > 0)",
        schema=schema,
    )
    # The claim's charge asks whether any queue has a rate before it looks at the queues of the
    # runs it started: one probe of an index that holds only the queues with one.
    op.create_index(
        "queues_rate_idx",
        "queues",
        ["environment", "name"],
        schema=schema,
        postgresql_where=sa.text("rate_limit IS NOT NULL"),
    )
    op.create_table(
        "rate_buckets",
        sa.Column("environment", sa.Text, primary_key=True),
        sa.Column("queue", sa.Text, primary_key=True),
        # '' is the bucket of the queue's keyless runs.
        sa.Column("concurrency_key", sa.Text, primary_key=True),
        sa.Column("full_at", sa.DateTime(timezone=True), nullable=False),
        schema=schema,
    )
    execute(
        """
        INSERT INTO {schema}.periodic_jobs (name, function, interval_s)
        VALUES ('prune_rate_buckets', 'prune_rate_buckets', 60.0)
        ON CONFLICT (name) DO NOTHING
        """
    )


def downgrade() -> None:
    schema = migration_schema()
    execute("DELETE FROM {schema}.periodic_jobs WHERE name = 'prune_rate_buckets'")
    op.drop_table("rate_buckets", schema=schema)
    op.drop_index("queues_rate_idx", "queues", schema=schema)
    op.drop_constraint("queues_rate_check", "queues", schema=schema)
    op.drop_column("queues", "rate_burst", schema=schema)
    op.drop_column("queues", "rate_period_s", schema=schema)
    op.drop_column("queues", "rate_limit", schema=schema)
