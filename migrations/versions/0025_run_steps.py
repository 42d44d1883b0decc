"""A run's recorded calls: each step and wait its handler made, by call position.

A handler's ``ctx.step`` calls and waits share one call position counter. ``run_steps`` keeps
one row per position: what was called (kind STEP or WAIT, and a name), the wait attempt that
recorded it, and for a step its JSON result or error with its timings. A replay (after a wait
that let go of its worker, a crash, or a retry) serves a completed step's result instead of
running its function again, and fails the run when it asks for something else at a position
than what was recorded. Rows go with their run (ON DELETE CASCADE), so pruning needs nothing
more.

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

from fairlane.schema.revision import schema as migration_schema

revision: str = "0025"
down_revision: str | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    schema = migration_schema()
    tz = sa.DateTime(timezone=True)
    op.create_table(
        "run_steps",
        sa.Column(
            "run_id",
            sa.BigInteger,
            sa.ForeignKey(f"{schema}.runs.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("position", sa.Integer, primary_key=True),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("result", JSONB),
        sa.Column("error", JSONB),
        sa.Column("started_at", tz, nullable=False, server_default=sa.text("now()")),
        sa.Column("finished_at", tz),
        sa.CheckConstraint("kind IN ('STEP', 'WAIT')", name="run_steps_kind_check"),
        sa.CheckConstraint(
            "status IN ('WAITING', 'COMPLETED', 'FAILED')", name="run_steps_status_check"
        ),
        schema=schema,
    )


def downgrade() -> None:
    schema = migration_schema()
    op.drop_table("run_steps", schema=schema)
