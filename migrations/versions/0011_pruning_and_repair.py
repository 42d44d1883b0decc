"""Pruning keeps what is still promised and takes the side tables too; the sweeper repairs.

A finished run is kept while its idempotency key is active (a key's lifetime no longer depends
on run retention): the pruning index orders finished runs by the later of their end and their
active key's expiry. Tokens are ordered the same way, and finished batches by their end, so
``prune_finished_runs`` (runs, their wait edges and the waitpoints nothing needs any more) and
the new ``prune_finished_batches`` job (batches and their items) read only what is due. The
``sweep_repair_waiting`` setting lets the concurrency sweeper wake waiting runs that have
nothing pending left.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from fairlane.schema.revision import execute
from fairlane.schema.revision import schema as migration_schema

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# A finished run's key stays active only if it ended COMPLETED or CANCELED (the others free
# it: fairlane.idempotency), so only those wait for the key's expiry.
RUN_PRUNE_KEY = (
    "greatest(finished_at, CASE WHEN idempotency_key IS NOT NULL "
    "AND status IN ('COMPLETED', 'CANCELED') THEN idempotency_key_expires_at END)"
)
TOKEN_PRUNE_KEY = (
    "greatest(completed_at, CASE WHEN idempotency_key IS NOT NULL THEN idempotency_expires_at END)"
)


def upgrade() -> None:
    schema = migration_schema()
    op.drop_index("runs_finished_idx", table_name="runs", schema=schema)
    op.create_index(
        "runs_prunable_idx",
        "runs",
        [sa.text(RUN_PRUNE_KEY)],
        schema=schema,
        postgresql_where=sa.text("finished_at IS NOT NULL"),
    )
    op.create_index(
        "waitpoints_prunable_idx",
        "waitpoints",
        [sa.text(TOKEN_PRUNE_KEY)],
        schema=schema,
        postgresql_where=sa.text("kind = 'MANUAL' AND status = 'COMPLETED'"),
    )
    op.create_index(
        "batches_finished_idx",
        "batches",
        ["completed_at"],
        schema=schema,
        postgresql_where=sa.text("completed_at IS NOT NULL"),
    )
    execute(
        """
        INSERT INTO {schema}.settings (name, value, description) VALUES
            ('sweep_repair_waiting', 'true', 'Whether the concurrency sweeper marks ready the waiting runs that have nothing pending left (a lost wake-up); each repair is counted in its result')
        ON CONFLICT (name) DO NOTHING
        """  # noqa: E501
    )
    execute(
        """
        INSERT INTO {schema}.periodic_jobs (name, function, interval_s)
        VALUES ('prune_finished_batches', 'prune_finished_batches', 60.0)
        ON CONFLICT (name) DO NOTHING
        """
    )


def downgrade() -> None:
    schema = migration_schema()
    execute("DELETE FROM {schema}.periodic_jobs WHERE name = 'prune_finished_batches'")
    execute("DELETE FROM {schema}.settings WHERE name = 'sweep_repair_waiting'")
    op.drop_index("batches_finished_idx", table_name="batches", schema=schema)
    op.drop_index("waitpoints_prunable_idx", table_name="waitpoints", schema=schema)
    op.drop_index("runs_prunable_idx", table_name="runs", schema=schema)
    op.create_index(
        "runs_finished_idx",
        "runs",
        ["finished_at"],
        schema=schema,
        postgresql_where=sa.text("finished_at IS NOT NULL"),
    )
