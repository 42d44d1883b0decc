"""Claim order: priority is a time offset, and delayed promotion loops within a tick.

A run is claimed in the order of ``queue_order``: when it last entered its queue
(``queued_at``) minus its priority in seconds, then id, so a run of lower priority waits at
most its difference in priority behind a steady stream of higher ones. ``queue_order`` is a
stored generated column, so every statement that inserts runs orders them without naming it;
``queued_at`` defaults to the insert's ``now()``, and promotion, retry and the other paths
that queue a run again set it (sql/). The queued index is rebuilt on it.

Runs that can be claimed again without passing through promotion (queued, executing, waiting)
get the time they were queued as far as the table knows it: their due time if they were
delayed, else their creation. Adding the generated column rewrites the runs table once.

``promote_batch_size`` and ``promote_max_batches`` bound what ``promote_delayed_runs`` does
per tick, like the TTL and pruning jobs' settings.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from fairlane.schema.revision import execute
from fairlane.schema.revision import schema as migration_schema

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# timestamptz - interval is only STABLE, so the offset is taken in epoch seconds (immutable
# arithmetic, exact to the microsecond for any timestamp a run can carry).
QUEUE_ORDER = "to_timestamp(date_part('epoch', queued_at - to_timestamp(0)) - priority)"


def upgrade() -> None:
    schema = migration_schema()
    tz = sa.DateTime(timezone=True)
    op.add_column(
        "runs",
        sa.Column("queued_at", tz, nullable=False, server_default=sa.text("now()")),
        schema=schema,
    )
    execute(
        """
        UPDATE {schema}.runs
        SET queued_at = coalesce(available_at, created_at)
        WHERE status IN ('QUEUED', 'EXECUTING', 'WAITING')
        """
    )
    op.add_column(
        "runs",
        sa.Column("queue_order", tz, sa.Computed(QUEUE_ORDER, persisted=True)),
        schema=schema,
    )
    op.drop_index("runs_queued_idx", table_name="runs", schema=schema)
    op.create_index(
        "runs_queued_idx",
        "runs",
        ["environment", "queue", "queue_order", "id"],
        schema=schema,
        postgresql_where=sa.text("status = 'QUEUED'"),
    )
    execute(
        """
        INSERT INTO {schema}.settings (name, value, description) VALUES
            ('promote_batch_size', '5000', 'Delayed runs made QUEUED per statement by promote_delayed_runs'),
            ('promote_max_batches', '10', 'Statements per promote_delayed_runs tick')
        ON CONFLICT (name) DO NOTHING
        """  # noqa: E501
    )


def downgrade() -> None:
    schema = migration_schema()
    execute(
        """
        DELETE FROM {schema}.settings WHERE name IN ('promote_batch_size', 'promote_max_batches')
        """
    )
    op.drop_index("runs_queued_idx", table_name="runs", schema=schema)
    op.create_index(
        "runs_queued_idx",
        "runs",
        ["environment", "queue", sa.text("priority DESC"), "id"],
        schema=schema,
        postgresql_where=sa.text("status = 'QUEUED'"),
    )
    op.drop_column("runs", "queue_order", schema=schema)
    op.drop_column("runs", "queued_at", schema=schema)
