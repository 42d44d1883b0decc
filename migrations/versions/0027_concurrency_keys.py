"""Concurrency keys: a run's key inside its queue, a queue's cap across keys, the claim's turn.

``runs.concurrency_key`` (NULL: no key) makes one copy of the queue's limit per key: a queue's
``concurrency_limit`` bounds each key's EXECUTING runs (keyless runs together count as one
key), and ``queues.total_limit`` (NULL: none) bounds the queue across its keys. The claim walks
a keyed queue's keys round robin from ``queues.key_cursor``, the last key it served there
(sql/claim/keys.sql), through ``runs_queued_key_idx``: the queued runs that have a key, by key,
then in queue order. Keyless runs never enter it, so they cost what they cost before. The index
is built concurrently: the runs table is large.

Two settings follow the seeds' system: ``environment_concurrency_limit`` (100), the limit an
environment gets when a trigger creates it (environments made before keep theirs), and the batch
token bucket's refill, 10 items per 10 s with at most 1,200 (seed 004; it was 100 per 10 s): a
database still at the old default moves to the new one, one that set its own keeps it.

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from fairlane.schema.revision_helpers import (
    create_index_concurrently,
    drop_index_concurrently,
    execute,
)
from fairlane.schema.revision_helpers import (
    schema as migration_schema,
)

revision: str = "0027"
down_revision: str | None = "0026"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    schema = migration_schema()
    op.add_column("runs", sa.Column("concurrency_key", sa.Text), schema=schema)
    op.add_column("queues", sa.Column("total_limit", sa.Integer), schema=schema)
    op.add_column("queues", sa.Column("key_cursor", sa.Text), schema=schema)
    op.create_check_constraint(
        "queues_total_limit_check",
        "queues",
        "total_limit IS NULL OR total_limit >= 0",
        schema=schema,
    )
    execute(
        """
        INSERT INTO {schema}.settings (name, value, description) VALUES
            ('environment_concurrency_limit', '100',
             'The concurrency limit of an environment a trigger creates (null: unlimited)')
        ON CONFLICT (name) DO NOTHING
        """
    )
    execute(
        """
        UPDATE {schema}.settings SET value = '10'
        WHERE name = 'batch_refill_amount' AND value = '100'
        """
    )
    create_index_concurrently(
        "runs_queued_key_idx",
        "runs",
        "(environment, queue, concurrency_key, queue_order, id)"
        " WHERE status = 'QUEUED' AND concurrency_key IS NOT NULL",
    )


def downgrade() -> None:
    schema = migration_schema()
    execute("DELETE FROM {schema}.settings WHERE name = 'environment_concurrency_limit'")
    drop_index_concurrently("runs_queued_key_idx")
    op.drop_constraint("queues_total_limit_check", "queues", schema=schema)
    op.drop_column("queues", "key_cursor", schema=schema)
    op.drop_column("queues", "total_limit", schema=schema)
    op.drop_column("runs", "concurrency_key", schema=schema)
