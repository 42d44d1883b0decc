"""Waits are keyed by attempt: a run retried after a failure starts its own waits.

Wait edges were keyed by (run, call position, item) only, so a retried handler found the
waits of the attempt that failed (its failed child, its due timer) and failed the same way.
``runs.wait_attempt`` is the attempt whose waits the run's executions keep: 1, then the next
attempt after each failure that is retried. A redelivery after a lapsed lease or a shutdown
counts as an attempt (``attempts``) but keeps ``wait_attempt``, so a replay of that attempt
finds its waits again. Each edge records the ``wait_attempt`` that made it, and the edges'
key becomes (run, attempt, position, item).

Edges made before this revision belong to attempt 1, as do runs already there: a run in the
middle of a wait keeps it, as it did before.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-05
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from fairlane.schema.revision import execute
from fairlane.schema.revision import schema as migration_schema

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    schema = migration_schema()
    op.add_column(
        "runs",
        sa.Column("wait_attempt", sa.Integer, nullable=False, server_default="1"),
        schema=schema,
    )
    # Filled once for the edges already there; every later edge names its attempt.
    op.add_column(
        "run_waitpoints",
        sa.Column("attempt", sa.Integer, nullable=False, server_default="1"),
        schema=schema,
    )
    op.alter_column("run_waitpoints", "attempt", server_default=None, schema=schema)
    op.drop_constraint("run_waitpoints_pkey", "run_waitpoints", schema=schema)
    op.create_primary_key(
        "run_waitpoints_pkey",
        "run_waitpoints",
        ["run_id", "attempt", "position", "item"],
        schema=schema,
    )


def downgrade() -> None:
    schema = migration_schema()
    # The old key holds one edge per (run, position, item): the latest attempt's stays.
    execute(
        """
        DELETE FROM {schema}.run_waitpoints AS e
        USING {schema}.run_waitpoints AS later
        WHERE later.run_id = e.run_id AND later.position = e.position
          AND later.item = e.item AND later.attempt > e.attempt
        """
    )
    op.drop_constraint("run_waitpoints_pkey", "run_waitpoints", schema=schema)
    op.create_primary_key(
        "run_waitpoints_pkey", "run_waitpoints", ["run_id", "position", "item"], schema=schema
    )
    op.drop_column("run_waitpoints", "attempt", schema=schema)
    op.drop_column("runs", "wait_attempt", schema=schema)
